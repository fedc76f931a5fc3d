"""`intent-router bench encoders`: a linear probe of frozen sentence encoders, on a small corpus and a small
file in CLINC150's format written here (never on the real benchmark), with the packaged MiniLM."""

import json

import pytest

from tests.test_benchmark_scope import ROWS as CLINC_TEST  # two side-effect intents, two of small talk
from training.benchmarks.encoder_probe import run_probe
from training.train_config import DEFAULT_BASE_MODEL

TRAIN = {
    "ACTION": [
        "turn off the kitchen lights",
        "send a text to my sister saying i'm running late",
        "book a table for four at eight tonight",
        "restart the billing service on prod",
        "add oat milk to my shopping list",
        "call the dentist and cancel tomorrow's appointment",
        "set a timer for twenty minutes",
        "create a ticket for the broken printer on floor 3",
    ],
    "SEARCH": [
        "where is the travel expense policy",
        "find last month's electricity bill",
        "pull up the onboarding checklist for new hires",
        "show me the contract we signed with the cleaners",
        "look up the warranty document for the washing machine",
        "which file has the q3 revenue numbers",
        "get me the minutes of monday's board meeting",
        "search my emails for the flight confirmation",
    ],
    "OUT_OF_SCOPE": [
        "hi there",
        "thanks a lot, that helped",
        "good night!",
        "haha nice one",
        "are you a robot",
        "bye for now",
        "you're awesome",
        "lol ok",
    ],
}
HELD_OUT = {
    "ACTION": [
        "switch on the porch light",
        "message dad that dinner is at seven",
        "delete the old staging user",
    ],
    "SEARCH": [
        "find the lease agreement for the flat",
        "where's the api style guide",
        "show me my pay slips",
    ],
    "OUT_OF_SCOPE": ["hello!", "thank you so much", "see you later"],
}


def _jsonl(path, rows):
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for y, ts in rows.items() for t in ts))
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    clinc = d / "data_full.json"
    other = {k: [["a row", "balance"]] for k in ("train", "val", "oos_train", "oos_val", "oos_test")}
    clinc.write_text(json.dumps({**other, "test": [[t, y] for y, ts in CLINC_TEST.items() for t in ts]}))
    return _jsonl(d / "train.jsonl", TRAIN), _jsonl(d / "held_out.jsonl", HELD_OUT), clinc


def test_a_frozen_encoder_carries_a_separable_label_set(corpus):
    train, held_out, clinc = corpus
    said = []
    result = run_probe([DEFAULT_BASE_MODEL], train, [held_out], clinc, report=said.append)
    (r,) = result["encoders"]
    assert result["train"] == {"file": str(train), "rows": 24, "labels": ["ACTION", "OUT_OF_SCOPE", "SEARCH"]}
    assert r["dimension"] == 384 and r["texts_per_second"] > 0
    figures = r["sets"]["held_out"]
    assert figures["n"] == 9 and figures["accuracy"] >= 7 / 9
    assert figures["in_scope_accuracy"] >= 0.8
    # the side-effect requests read as ACTION, the small talk as out of scope
    assert r["clinc150"]["n"] == {"side_effect": 4, "small_talk": 2}
    assert r["clinc150"]["side_effect_action"] >= 0.75 and r["clinc150"]["small_talk_out_of_scope"] == 1.0
    assert any("texts/s" in s for s in said) and any("CLINC150" in s for s in said)


def test_a_training_file_with_one_label_is_refused(tmp_path):
    one = _jsonl(tmp_path / "one.jsonl", {"ACTION": TRAIN["ACTION"]})
    with pytest.raises(ValueError, match="at least two labels"):
        run_probe([DEFAULT_BASE_MODEL], one, [])
    with pytest.raises(ValueError, match="at least one encoder"):
        run_probe([], one, [])


def test_the_command_prints_a_table_and_writes_the_results(corpus, tmp_path):
    from typer.testing import CliRunner

    from cli import app

    train, held_out, _ = corpus
    out = tmp_path / "probe.json"
    args = ["bench", "encoders", "--encoder", DEFAULT_BASE_MODEL, "--train", str(train)]
    r = CliRunner().invoke(app, [*args, "--data", str(held_out), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "linear probe" in r.output and "held_out" in r.output
    assert json.loads(out.read_text())["encoders"][0]["sets"]["held_out"]["n"] == 9
    bad = CliRunner().invoke(app, [*args, "--data", str(tmp_path / "missing.jsonl")])
    assert bad.exit_code == 2 and "missing.jsonl" in bad.output
