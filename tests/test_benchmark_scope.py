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
