"""Conversations: a continuation takes the conversation's intents, small talk stays out of scope after a
request, a message with its own intent keeps it; through route(), the HTTP service, log scoring and eval."""

from __future__ import annotations

import json

import pytest

from eval.metrics.conversation_turns import conversation_metrics, load_conversations
from eval.readers.sources import DataError
from router.classifier import Classification
from router.conversation import (
    carried_intents,
    context_weight,
    in_context,
    is_continuation,
    resolve_context,
    with_prior,
)
from router.routing import Router
from tests.conftest import ROOT, SHIPPED, SHIPPED_INTENTS

RESTART = "restart the indexing service on prod-2"


@pytest.fixture(scope="module")
def router():
    return Router.load(SHIPPED)


@pytest.fixture(scope="module")
def after_action(router):
    d = router.route(RESTART, role="admin")
    assert d.intent == "ACTION" and d.requires_confirmation
    return d


# ------------------------------------------------------------------------------- the rules
def test_in_context_a_continuation_adds_to_the_conversations_intent():
    ranking = [("ACTION", 0.4), ("CONTINUATION", 0.4), ("PLANNING", 0.1), ("OUT_OF_SCOPE", 0.1)]
    best, mass = in_context(ranking, "PLANNING")
    assert best == "PLANNING" and mass == pytest.approx(0.5)
    assert in_context(ranking, "ACTION") == ("ACTION", pytest.approx(0.8))
    best, mass = in_context([("OUT_OF_SCOPE", 0.55), ("CONTINUATION", 0.3), ("SEARCH", 0.15)], "SEARCH")
    assert best is None and mass == pytest.approx(0.55)


def test_after_a_turn_the_continuation_class_weighs_its_training_prior():
    assert context_weight({"OUT_OF_SCOPE": 1346, "CONTINUATION": 695}) == pytest.approx(1346 / 695)
    assert context_weight({"OUT_OF_SCOPE": 10, "CONTINUATION": 40}) == 1.0  # never below even odds
    assert context_weight({}) == context_weight(None) == 2.0  # a manifest that does not count its rows
    c = Classification("OUT_OF_SCOPE", 0.5, [("OUT_OF_SCOPE", 0.5), ("CONTINUATION", 0.3), ("ACTION", 0.2)])
    read = with_prior(c, 2.0)
    assert read.label == "CONTINUATION" and read.confidence == pytest.approx(0.8 * 0.6 / 1.1)
    assert dict(read.ranking)["ACTION"] == 0.2  # an intent's probability stays as it is
    assert sum(p for _, p in read.ranking) == pytest.approx(1.0)
    assert with_prior(c, 1.0) is c


def test_an_unsure_continuation_with_no_turn_before_it_still_asks_for_nothing():
    sure = Classification("CONTINUATION", 0.9, [("CONTINUATION", 0.9), ("OUT_OF_SCOPE", 0.1)])
    unsure = Classification(
        "CONTINUATION", 0.6, [("CONTINUATION", 0.6), ("OUT_OF_SCOPE", 0.3), ("ACTION", 0.1)]
    )
    request = Classification(
        "CONTINUATION", 0.5, [("CONTINUATION", 0.5), ("ACTION", 0.4), ("OUT_OF_SCOPE", 0.1)]
    )
    assert is_continuation(sure, 0.75, has_turn=True) and is_continuation(sure, 0.75, has_turn=False)
    assert is_continuation(unsure, 0.75, has_turn=False)  # 0.9 of it asks for nothing of its own
    assert not is_continuation(unsure, 0.75, has_turn=True)  # read in context instead
    assert not is_continuation(request, 0.75, has_turn=False)  # may be a request: verifier or fallback


def test_the_context_comes_from_the_decision_before_the_message():
    calls = []

    def route_message(m):
        calls.append(m)
        return ["SEARCH"]

    assert resolve_context(None, None, route_message) is None
    ctx = resolve_context(None, "find the deck", route_message)
    assert ctx.intents == ("SEARCH",) and ctx.source == "previous_message" and calls == ["find the deck"]
    assert resolve_context(None, "", route_message) is None and len(calls) == 1


# ------------------------------------------------------------------------- through route()
@pytest.mark.parametrize("text", ["thanks!", "cheers, that worked", "bye for now", "lol nice"])
def test_social_after_an_action_loads_no_skill_and_asks_no_confirmation(router, after_action, text):
    d = router.route(text, role="admin", previous=after_action)
    assert d.intent is None and "action" not in d.skills.all and not d.requires_confirmation, d.brief()
    # out of scope, or (below the threshold, no verifier) the fallback's skills: never the action's
    assert d.reason_code.value in ("out_of_scope", "no_verifier")
    assert list(d.conversation_intents) == ["ACTION"]  # carried for the turn after


@pytest.mark.parametrize("text", ["the same for the EU cluster", "yes, do it", "try again"])
def test_a_continuation_after_an_action_keeps_action_and_its_confirmation(router, after_action, text):
    d = router.route(text, role="admin", previous=after_action)
    assert d.intent == "ACTION" and d.reason_code.value == "follow_up", (text, d.brief())
    assert d.requires_confirmation and "action" in d.skills.required
    step = next(s for s in d.trace if s.stage == "conversation" and s.status == "continuation")
    assert step.detail["intents"] == ["ACTION"] and step.detail["from"] == "previous_decision"


def test_a_continuation_without_a_previous_turn_needs_context(router):
    d = router.route("the same for the EU cluster", role="admin")
    assert d.intent is None and d.reason_code.value == "needs_context" and d.skills.all == []
    assert "previous" in d.message


def test_the_previous_message_alone_is_context_enough(router):
    d = router.route("the same for the EU cluster", role="admin", context=RESTART)
    assert d.intent == "ACTION" and d.reason_code.value == "follow_up"
    step = next(s for s in d.trace if s.stage == "conversation" and s.status == "continuation")
    assert step.detail["from"] == "previous_message" and step.detail["message_chars"] == len(RESTART)


def test_a_message_with_its_own_intent_keeps_it(router):
    prev = router.route("find the Q3 board deck", role="admin")
    assert prev.intent == "SEARCH"
    d = router.route("forward it to the whole leadership team", role="admin", previous=prev)
    assert d.intent == "ACTION" and d.reason_code.value == "confident"
    # a switch that opens with thanks: the turn reader reads it, and the message's own intent stays on top,
    # never the previous turn's SEARCH (below the threshold it would wait for a verifier)
    d = router.route("thanks, now send it to Maria", role="admin", previous=prev)
    assert d.ranking[0].intent == "ACTION" and "SEARCH" not in d.intents
    assert any(s.stage == "conversation" and s.status == "turn" for s in d.trace)


def test_a_continuation_after_small_talk_finds_the_request_before_it(router):
    plan = router.route("draft a rollout plan for the new billing system", role="admin")
    assert plan.intent == "PLANNING"
    social = router.route("thanks, looks good", role="admin", previous=plan)
    assert social.intent is None
    d = router.route("add a checkpoint for the beta though", role="admin", previous=social)
    assert d.intent == "PLANNING", d.brief()


def test_a_single_message_pays_nothing_for_conversations(router):
    """No context is routed for a message that is not a continuation."""
    d = router.route(RESTART, role="admin", context="find the travel policy")
    assert d.intent == "ACTION" and d.reason_code.value == "confident"
    # the turn reader's reading, and no context routed
    assert [s.status for s in d.trace if s.stage == "conversation"] == ["turn"]


def test_context_must_be_text(router):
    with pytest.raises(TypeError, match="context"):
        router.route("yes", role="admin", context=42)


def test_carried_intents_keep_a_compound_pair(router):
    d = router.route("find the Q3 board deck and email it to Maria", role="admin")
    assert len(d.intents) == 2
    assert carried_intents(d) == list(d.intents)
    follow = router.route("same for the Q4 deck", role="admin", previous=d)
    assert list(follow.intents) == carried_intents(d)


# ------------------------------------------------------------------------------ evaluation
def test_conversation_files_are_checked_with_their_line(tmp_path):
    bad = tmp_path / "c.jsonl"
    bad.write_text(
        json.dumps({"turns": [{"text": "find the deck", "label": "SEARCH"}]})
        + "\n"
        + json.dumps(
            {
                "turns": [
                    {"text": "a", "label": "SEARCH"},
                    {"text": "thanks", "label": "SEARCH", "kind": "thanks"},
                ]
            }
        )
        + "\n"
    )
    with pytest.raises(DataError, match=r"c.jsonl:1: .*at least two turns"):
        load_conversations(bad, SHIPPED_INTENTS)
    bad.write_text(bad.read_text().splitlines()[1] + "\n")
    with pytest.raises(DataError, match=r"c.jsonl:1: turn 2: a social turn .* OUT_OF_SCOPE"):
        load_conversations(bad, SHIPPED_INTENTS)


def test_conversation_metrics_count_each_kind_of_turn(router, tmp_path):
    f = tmp_path / "c.jsonl"
    convs = [
        [(RESTART, "ACTION", None), ("thanks!", "OUT_OF_SCOPE", "thanks")],
        [(RESTART, "ACTION", None), ("the same for the EU cluster", "ACTION", "slot_change")],
        [
            ("find the Q3 board deck", "SEARCH", None),
            ("forward it to the whole leadership team", "ACTION", "switch"),
        ],
        # a wrong expectation, so that a miss is counted and listed
        [("find the Q3 board deck", "SEARCH", None), ("the one from March", "PLANNING", "selection")],
    ]
    f.write_text(
        "".join(
            json.dumps(
                {"turns": [{"text": t, "label": lab, **({"kind": k} if k else {})} for t, lab, k in c]}
            )
            + "\n"
            for c in convs
        )
    )
    m = conversation_metrics(router, load_conversations(f, router.intents))
    assert m["social"] == {"n": 1, "not_routed": 1.0}
    assert m["continuation"]["n"] == 2 and m["continuation"]["resolved"] == 0.5
    assert m["continuation"]["routed_without_previous"] == 0.0
    assert m["switch"] == {"n": 1, "kept": 1.0} and m["requests"]["accuracy"] == 1.0
    (miss,) = m["misses"]
    assert miss["line"] == 4 and miss["expected"] == "PLANNING" and miss["routed"] == ["SEARCH"]


@pytest.mark.slow
def test_eval_reports_conversations_and_the_gate_holds_their_floors(tmp_path):
    from eval.metrics.evaluator import run_evaluation
    from eval.reports.gate import make_baseline, run_gate

    data = ROOT / "data"
    report = run_evaluation(
        SHIPPED,
        data / "test.jsonl",
        conversations=data / "conversations" / "test.jsonl",
        max_latency_samples=0,
    )
    cv = report["conversation"]
    assert cv["conversations"] > 200 and cv["social"]["n"] > 80 and cv["continuation"]["n"] > 100
    from eval.reports.markdown import render_markdown

    md = render_markdown(report, plots=False)
    assert "## Conversations" in md and f"(n={cv['continuation']['n']})" in md
    baseline = make_baseline(report)
    assert set(baseline["conversation"]) == {"social_not_routed", "continuations_resolved", "switches_kept"}
    assert all(c.passed for c in run_gate(report, baseline) if c.name.startswith("conversation."))
    worse = json.loads(json.dumps(report))
    worse["conversation"]["social"]["not_routed"] -= 0.1
    failed = [c.name for c in run_gate(worse, baseline) if not c.passed]
    assert failed == ["conversation.social_not_routed"]


# --------------------------------------------------------------------- serve and score
@pytest.mark.slow
def test_serve_reads_a_message_after_the_previous_turn(tmp_path):
    pytest.importorskip("fastapi")
    from tests.test_serve import Server

    s = Server(tmp=tmp_path)
    try:
        first = s.route({"role": "admin", "message": RESTART}).json()["decisions"][0]
        by_decision = s.route(
            {"role": "admin", "message": "the same for the EU cluster", "previous": {"decision": first}}
        )
        (d,) = by_decision.json()["decisions"]
        assert (d["intent"], d["reason_code"], d["requires_confirmation"]) == ("ACTION", "follow_up", True)
        (d,) = s.route(
            {"role": "admin", "message": "the same for the EU cluster", "previous": {"message": RESTART}}
        ).json()["decisions"]
        assert d["intent"] == "ACTION" and d["trace"][-2]["detail"]["from"] == "previous_message", d["trace"]
        (d,) = s.route({"role": "admin", "message": "thanks!", "previous": {"decision": first}}).json()[
            "decisions"
        ]
        assert d["intent"] is None and d["skills"] == {"required": [], "optional": []}
        assert d["conversation_intents"] == ["ACTION"]
        empty = s.route({"role": "admin", "message": "yes", "previous": {}})
        assert empty.status_code == 422 and "previous" in empty.json()["error"]["message"]
        schema = s.client.get("/openapi.json").json()
        assert "previous" in json.dumps(schema)
    finally:
        s.stop()


def test_score_reads_each_row_after_its_previous_message(tmp_path):
    pytest.importorskip("pyarrow")
    from router.score import ScoreOptions, score_file

    rows = [
        {"text": "the same for the EU cluster", "prev": RESTART},
        {"text": "the same for the EU cluster"},
        {"text": "thanks!", "prev": RESTART},
        {"text": "find the travel policy", "prev": None},
    ]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    opts = ScoreOptions(role="admin", context_column="prev", model_dir=str(SHIPPED))
    score_file(inp, out, opts, progress=False)
    got = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(g["intent"], g["reason_code"]) for g in got] == [
        ("ACTION", "follow_up"),
        (None, "needs_context"),
        (None, "out_of_scope"),
        ("SEARCH", "confident"),
    ]
