"""Replay (intent-router replay): logged traffic routed again by a candidate, with flips, the intent mix,
confident disagreements and latency, on a real decision log of the shipped model."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from eval.compare.figures import ACCEPTED, CompareError
from eval.compare.replay import NONE, Answer, Logged, flips, mix_shift, read_records, replay_log
from router.decision_log import DecisionLog, read_log
from tests.conftest import FAST, SHIPPED

MESSAGES = [
    "find the latest incident report for the payments api",
    "why does our p99 latency spike every monday morning",
    "plan the rollout of the new billing service over three weeks",
    "remember that the staging database moves to eu-west next month",
    "restart the indexing workers in us-east",
    "hi there, how's it going",
    "thanks, that's all",
    "what did I tell you about the vendor contract",
    "send the quarterly summary to the finance channel",
    "is the rotterdam warehouse open on sundays",
    "compare postgres and mysql for our analytics workload",
    "draft a plan for migrating the wiki, then email it to the team",
]
FOLLOW_UP = ("and the same for eu-west", "restart the indexing workers in us-east")


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory):
    """A decision log the shipped model wrote: every message, and one follow-up read after its turn."""
    from router import Router

    directory = tmp_path_factory.mktemp("replay") / "decisions"
    router = Router.load(SHIPPED, decision_log=DecisionLog(directory))
    for m in MESSAGES:
        router.route(m, role="admin")
    router.route(FOLLOW_UP[0], role="admin", context=FOLLOW_UP[1])
    router.decision_log.close()
    return directory


def answer(key: str, reason: str = "confident", confidence: float = 0.95) -> Answer:
    return Answer(tuple(key.split("+")) if key != NONE else (), reason, confidence)


def test_flips_count_changes_and_confident_disagreements():
    rows = [Logged(f"m{i}", None, answer("SEARCH")) for i in range(5)]
    before = [
        answer("SEARCH"),
        answer("SEARCH"),
        answer("ACTION"),
        answer(NONE, "out_of_scope"),
        answer("MEMORY"),
    ]
    after = [
        answer("SEARCH"),
        answer("REASONING"),  # both accepted, another top intent: a confident disagreement
        answer("ACTION+MEMORY", "confident_compound"),  # the same top intent, one more: a flip only
        answer("SEARCH", "low_confidence", 0.5),  # not accepted: a flip only
        answer("MEMORY"),
    ]
    f = flips(rows, before, after)
    assert f["flipped"] == 3 and f["flip_rate"] == 0.6
    assert {(k["before"], k["after"]) for k in f["kinds"]} == {
        ("SEARCH", "REASONING"),
        ("ACTION", "ACTION+MEMORY"),
        (NONE, "SEARCH"),
    }
    assert f["confident_disagreements"] == 1 and f["confident_examples"][0]["message"] == "m1"


def test_the_intent_mix_counts_each_intent_of_a_message_and_no_intent():
    before = [answer("SEARCH"), answer("SEARCH"), answer(NONE, "out_of_scope"), answer("ACTION")]
    after = [answer("SEARCH"), answer("SEARCH+ACTION"), answer("SEARCH"), answer("ACTION")]
    rows = {r["name"]: r for r in mix_shift(before, after, lambda a: a.intents or (NONE,))}
    assert rows["SEARCH"]["before"] == 0.5 and rows["SEARCH"]["after"] == 0.75
    assert rows["SEARCH"]["shift_points"] == 25.0 and rows["ACTION"]["shift_points"] == 25.0
    assert rows[NONE]["shift_points"] == -25.0


def test_records_without_a_message_are_left_out_and_an_empty_log_is_refused(tmp_path):
    (tmp_path / "decisions-1.jsonl").write_text(
        json.dumps({"message": "", "decision": {}})
        + "\n"
        + json.dumps({"message": "hi", "decision": {"reason_code": "guardrail_rejected"}})
        + "\n"
    )
    with pytest.raises(CompareError, match="no record with a message"):
        read_records(tmp_path)
    with pytest.raises(CompareError, match="no such decision log"):
        read_records(tmp_path / "missing")


def test_the_same_model_replayed_on_its_own_log_changes_nothing(log_dir):
    result = replay_log(log_dir, SHIPPED, incumbent=SHIPPED)
    assert result["messages"] == len(MESSAGES) + 1 and result["with_previous_message"] == 1
    assert result["flipped"] == 0 and result["log_agreement"] == 1.0
    assert all(r["shift_points"] == 0 for r in result["intent_mix"])
    assert set(result["latency_ms"]) == {"candidate", "incumbent"}


def test_a_changed_log_shows_as_flips_against_what_was_served(log_dir, tmp_path):
    """Three records are rewritten to say MEMORY was served with confidence: replaying the model that
    really served them finds exactly those three flips, each a confident disagreement if it was accepted."""
    records = list(read_log(log_dir))
    changed = [0, 2, 4]  # SEARCH, PLANNING and ACTION requests
    accepted = sum(records[i]["decision"]["reason_code"] in ACCEPTED for i in changed)
    for i in changed:
        d = records[i]["decision"]
        d["intents"], d["reason_code"], d["confidence"] = ["MEMORY"], "confident", 0.97
    edited = tmp_path / "decisions-edited.jsonl"
    edited.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = replay_log(edited, SHIPPED, limit=len(MESSAGES))
    assert result["before"] == "log" and result["messages"] == len(MESSAGES)
    assert result["flipped"] == 3
    assert sum(k["count"] for k in result["kinds"]) == 3
    assert all(k["before"] == "MEMORY" for k in result["kinds"])
    assert {e["message"] for k in result["kinds"] for e in k["examples"]} == {MESSAGES[i] for i in changed}
    assert result["confident_disagreements"] == accepted
    memory = next(r for r in result["intent_mix"] if r["name"] == "MEMORY")
    assert memory["shift_points"] == pytest.approx(-300 / len(MESSAGES), abs=1e-3)


def test_the_command_writes_the_report_and_gates_on_the_flip_rate(log_dir, tmp_path):
    from cli import app

    out = tmp_path / "report"
    args = ["replay", str(log_dir), "--candidate", str(FAST), "--out", str(out), "--json"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    result = json.loads((out / "replay.json").read_text())
    assert result["models"]["candidate"].startswith("intent-minilm-fast@")
    assert "## Intent mix" in (out / "replay.md").read_text()
    if result["flipped"]:  # the fast model reads some of these messages otherwise: a limit below that fails
        r = CliRunner().invoke(app, [*args, "--max-flip-rate", str(result["flip_rate"] / 2)])
        assert r.exit_code == 1
    r = CliRunner().invoke(app, ["replay", str(tmp_path / "nothing"), "--candidate", str(FAST)])
    assert r.exit_code == 2 and "no such decision log" in r.output
