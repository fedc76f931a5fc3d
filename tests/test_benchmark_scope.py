"""`intent-router bench scope`: CLINC150's side-effect intents, small talk and oos_test routed by a model,
on a small file in CLINC150's format written here (never on the real benchmark)."""

import json

import pytest

from tests.conftest import SHIPPED
from training.benchmarks.clinc_scope import (
    INFORMATION_INTENTS,
    LIVE_DATA_INTENTS,
    SIDE_EFFECT_INTENTS,
    SMALL_TALK_INTENTS,
    run_scope_check,
    scope_groups,
)

ROWS = {
    "text": ["text my brother that i'm outside", "send a message to the landlord about the leak"],
    "alarm": ["wake me up at 6:30 tomorrow", "set an alarm for 7"],
    "greeting": ["hey there, good morning"],
    "thank_you": ["thanks so much, that was helpful"],
    "weather": ["will it rain in boston tomorrow", "do i need a coat today"],
    "definition": ["what does ubiquitous mean"],
    "balance": ["what is the balance of my checking account"],  # in no group
}
OOS = ["how do i become a better singer", "what's the best age to learn chess"]


@pytest.fixture(scope="module")
def clinc(tmp_path_factory):
    path = tmp_path_factory.mktemp("clinc") / "data_full.json"
    test = [[t, intent] for intent, texts in ROWS.items() for t in texts]
    other = {k: [["a row", "balance"]] for k in ("train", "val")}
    oos = {k: [["an oos row", "oos"]] for k in ("oos_train", "oos_val")}
    path.write_text(json.dumps({**other, **oos, "test": test, "oos_test": [[t, "oos"] for t in OOS]}))
    return path


def test_the_groups_take_their_intents_from_the_test_split(clinc):
    groups = scope_groups(clinc)
    assert [y for _, y in groups["side_effect"]] == ["text", "text", "alarm", "alarm"]
    assert {y for _, y in groups["small_talk"]} == {"greeting", "thank_you"}
    assert [y for _, y in groups["information"]] == ["weather", "weather", "definition"]
    assert [t for t, _ in groups["oos_test"]] == OOS
    assert "alarm" in SIDE_EFFECT_INTENTS and "greeting" in SMALL_TALK_INTENTS
    assert len(INFORMATION_INTENTS) == 33 and len(LIVE_DATA_INTENTS) == 18 and "weather" in LIVE_DATA_INTENTS


def test_each_group_is_routed_and_counted_with_the_distance_on_and_off(clinc):
    said = []
    result = run_scope_check(clinc, SHIPPED, "admin", report=said.append)
    assert set(result["runs"]) == {"model", "off"} and len(said) == 2
    for groups in result["runs"].values():
        se, st = groups["side_effect"], groups["small_talk"]
        assert se["n"] == 4 and sum(r["n"] for r in se["per_intent"].values()) == 4
        assert se["action"] == sum(r["action"] for r in se["per_intent"].values()) / 4
        assert st["n"] == 2 and st["routed"] + st["not_routed"] == pytest.approx(1.0)
        assert st["out_of_scope"] == sum(st["out_of_scope_by"].values()) / 2
        info = groups["information"]
        assert info["n"] == 3 and info["live_data_n"] == 2
        per = info["per_intent"]
        assert info["routed_confident"] == pytest.approx(sum(r["routed"] for r in per.values()) / 3, abs=1e-6)
        assert info["live_data_search"] == pytest.approx(per["weather"]["search"] / 2, abs=1e-6)
        assert info["below_threshold"] == pytest.approx(sum(r["unsure"] for r in per.values()) / 3, abs=1e-6)
    assert result["runs"]["off"]["small_talk"]["out_of_scope_by"].get("distance", 0) == 0


def test_an_unknown_distance_choice_is_refused(clinc):
    with pytest.raises(ValueError, match="distance choice"):
        run_scope_check(clinc, SHIPPED, "admin", distance=("sometimes",))


def test_the_command_prints_a_table_and_writes_the_results_in_a_new_folder(clinc, tmp_path):
    from typer.testing import CliRunner

    from cli import app

    out = tmp_path / "reports" / "scope.json"  # a folder that does not exist yet is made
    args = [
        "bench",
        "scope",
        "--path",
        str(clinc),
        "--model",
        str(SHIPPED),
        "--distance",
        "off",
        "--out",
        str(out),
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "side-effect: ACTION" in r.output and list(json.loads(out.read_text())["runs"]) == ["off"]
    bad = CliRunner().invoke(app, [*args[:-4], "--distance", "never"])
    assert bad.exit_code == 2 and "distance choice" in bad.output


CONTRACT = [
    {"group": "information", "id": 0, "intents": ["SEARCH"], "ambiguous": False},  # will it rain in boston
    {"group": "information", "id": 1, "intents": ["SEARCH"], "ambiguous": False},
    {"group": "information", "id": 2, "intents": ["REASONING"], "ambiguous": False},  # what does ... mean
    {"group": "small_talk", "id": 0, "intents": ["OUT_OF_SCOPE"], "ambiguous": False},
    {"group": "small_talk", "id": 1, "intents": ["OUT_OF_SCOPE"], "ambiguous": False},
    {"group": "oos_test", "id": 0, "intents": ["PLANNING"], "ambiguous": False},  # a better singer
    {"group": "oos_test", "id": 1, "intents": ["REASONING"], "ambiguous": True},  # the best age for chess
]


def _write(tmp_path, rows, name="contract.jsonl"):
    path = tmp_path / name
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n")
    return path


def test_the_contract_figures_read_each_routed_message_against_its_label(clinc, tmp_path):
    """A message is routed as the contract says when its first intent is among the Decision's intents, or,
    labelled OUT_OF_SCOPE, when no intent is routed; a group with no labels gets no contract figures."""
    from router import Router

    result = run_scope_check(clinc, SHIPPED, "admin", ("off",), contract=_write(tmp_path, CONTRACT))
    figures = result["runs"]["off"]
    assert "contract" not in figures["side_effect"]
    router, groups = Router.load(SHIPPED), scope_groups(clinc)
    for group in ("information", "small_talk", "oos_test"):
        labels = [r for r in CONTRACT if r["group"] == group]
        decisions = router.route_batch([t for t, _ in groups[group]], "admin")
        right = [
            (not decisions[r["id"]].intents)
            if r["intents"] == ["OUT_OF_SCOPE"]
            else r["intents"][0] in decisions[r["id"]].intents
            for r in labels
        ]
        c = figures[group]["contract"]
        assert c["n"] == len(labels) and c["as_contract"] == pytest.approx(sum(right) / len(labels), abs=1e-6)
        assert sum(p["as_contract"] for p in c["per_label"].values()) == sum(right)
    c = figures["oos_test"]["contract"]
    assert c["asks_for_an_intent"] == 1.0 and c["asking_none_not_routed"] is None and c["ambiguous"] == 0.5
    assert c["unambiguous"]["n"] == 1
    live = figures["information"]["contract"]["live_data"]
    weather = router.route_batch([t for t, y in groups["information"] if y == "weather"], "admin")
    assert live["n"] == 2 and live["contract_search"] == 1.0
    assert live["search_of_contract_search"] == sum("SEARCH" in d.intents for d in weather) / 2
    assert figures["small_talk"]["contract"]["asks_for_an_intent"] == 0.0


@pytest.mark.parametrize(
    "rows,message",
    [
        (['{"group": "oos_test", "id": 0}'], "needs group, id and intents"),
        (["not json"], "needs group, id and intents"),
        ([{"group": "banking", "id": 0, "intents": ["SEARCH"]}], "group 'banking'"),
        ([{"group": "oos_test", "id": "7", "intents": ["SEARCH"]}], "id must be a number"),
        ([CONTRACT[5], CONTRACT[5]], "labelled twice"),
        ([{"group": "oos_test", "id": 2, "intents": ["SEARCH"]}], "ids \\[2\\] are outside it"),
        ([{"group": "oos_test", "id": 0, "intents": ["SMALLTALK"]}], "names \\['SMALLTALK'\\]"),
    ],
)
def test_a_malformed_contract_file_is_refused_with_its_line_or_its_label(clinc, tmp_path, rows, message):
    with pytest.raises(ValueError, match=message):
        run_scope_check(clinc, SHIPPED, "admin", ("off",), contract=_write(tmp_path, rows))


def test_the_command_prints_the_contract_table(clinc, tmp_path):
    from typer.testing import CliRunner

    from cli import app

    args = ["bench", "scope", "--path", str(clinc), "--model", str(SHIPPED), "--distance", "off"]
    r = CliRunner().invoke(app, [*args, "--contract", str(_write(tmp_path, CONTRACT))])
    assert r.exit_code == 0, r.output
    assert "By the labelling contract" in r.output and "oos_test" in r.output
    missing = CliRunner().invoke(app, [*args, "--contract", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2 and "none.jsonl" in missing.output
