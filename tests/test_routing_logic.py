"""The routing rules with no model: a fake classifier (router.classification.RoutingClassifier) returns fixed
Classifications, so each test says exactly what the model thinks and checks what the Router decides."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from router.classification import Classification
from router.config import RouterConfig
from router.routing import Router
from router.verifier import VerifierResult

LABELS = ("SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION", "OUT_OF_SCOPE", "CONTINUATION")


def answer(intents: list[str] | None = None, truncated: bool = False, **probs: float) -> Classification:
    """A Classification with ``probs`` (label=probability) and the rest of the mass spread evenly over the
    other labels; ``intents`` defaults to the top label when it is an intent."""
    rest = [label for label in LABELS if label not in probs]
    share = (1.0 - sum(probs.values())) / len(rest)
    ranking = sorted({**dict.fromkeys(rest, share), **probs}.items(), key=lambda kv: -kv[1])
    top, p = ranking[0]
    if intents is None:
        intents = [] if top in ("OUT_OF_SCOPE", "CONTINUATION") else [top]
    return Classification(top, p, ranking, truncated=truncated, num_tokens=7, intents=intents)


class FakeClassifier:
    """What a Router needs from a classifier, answering from a dict of text -> Classification."""

    labels = LABELS
    model_id = "fake/test"

    def __init__(self, answers: dict[str, Classification]) -> None:
        self.answers = dict(answers)
        self.label_counts = {"OUT_OF_SCOPE": 10, "CONTINUATION": 10}  # equal: no prior change after a turn
        self.distance_threshold: float | None = None
        self.seen: list[str] = []

    def classify_batch(self, texts):
        self.seen.extend(texts)
        return [self.answers[t] for t in texts]


ANSWERS = {
    "restart the indexing service": answer(ACTION=0.92),
    "where is the travel policy": answer(SEARCH=0.55, REASONING=0.3),
    "thanks, that's all": answer(OUT_OF_SCOPE=0.9),
    "yes, do it": answer(CONTINUATION=0.9),
    "find the deck and email it to Maria": answer(intents=["ACTION", "SEARCH"], ACTION=0.5, SEARCH=0.45),
    "a very long message": answer(truncated=True, PLANNING=0.95),
}


class FixedVerifier:
    intents = None  # takes whatever intents it is asked about

    def __init__(self, intent: str, reason_code: str = "fresh_request") -> None:
        self.intent, self.reason_code, self.calls = intent, reason_code, []

    def verify(self, text, classification, previous=None, context=None):
        self.calls.append((text, classification.label, previous))
        return VerifierResult(intent=self.intent, reason_code=self.reason_code)


def make_router(config: RouterConfig | None = None, **kw) -> Router:
    return Router(FakeClassifier(ANSWERS), config or RouterConfig.load(), **kw)


def config_with(**changes) -> RouterConfig:
    data = json.loads(RouterConfig.load().model_dump_json())
    data.update(changes)
    return RouterConfig.model_validate(data)


@pytest.fixture
def router() -> Router:
    return make_router()


def stages(d) -> list[tuple[str, str]]:
    return [(s.stage, s.status) for s in d.trace]


def test_at_or_above_the_threshold_the_classifiers_intent_is_routed(router):
    d = router.route("restart the indexing service", role="admin")
    assert (d.intent, d.source, d.reason_code.value) == ("ACTION", "classifier", "confident")
    assert d.skills.required == ["action"] and d.skills.optional == ["reflection"]
    assert d.requires_confirmation and d.servable and d.threshold == 0.75
    assert stages(d) == [
        ("guardrail", "pass"),
        ("classifier", "ok"),
        ("threshold", "accepted"),
        ("rbac", "ok"),
    ]
    assert d.trace[1].detail == {"label": "ACTION", "confidence": 0.92, "tokens": 7}
    assert d.model_id == "fake/test" and d.latency.total_ms > 0


def test_below_the_threshold_without_a_verifier_the_fallback_intents_skills_are_loaded(router):
    d = router.route("where is the travel policy", role="admin")
    assert d.intent is None and d.intents == []
    assert (d.source, d.reason_code.value) == ("fallback", "no_verifier")
    assert d.skills.required == ["retrieval", "synthesis"] and d.skills.optional == ["reflection"]
    assert d.conversation_intents == ["SEARCH"]  # what a continuation of it most likely continues
    assert stages(d)[2:] == [
        ("threshold", "below"),
        ("verifier", "absent"),
        ("fallback", "used"),
        ("rbac", "ok"),
    ]


def test_below_the_threshold_with_no_fallback_intents_the_router_asks_the_user():
    d = make_router(config_with(fallback_intents=[])).route("where is the travel policy", role="admin")
    assert d.intent is None and d.reason_code.value == "clarify"
    assert d.skills.required == [] and d.skills.optional == []
    assert d.message.endswith(
        "ask the user what they need"
    )  # a caller reading only the message knows what to do


def test_below_the_threshold_the_verifier_chooses():
    v = FixedVerifier("SEARCH")
    d = make_router(verifier=v).route("where is the travel policy", role="admin")
    assert (d.intent, d.source, d.reason_code.value) == ("SEARCH", "verifier", "verified")
    assert v.calls == [("where is the travel policy", "SEARCH", None)]


def test_a_compound_request_sure_of_its_two_intents_together_is_accepted(router):
    d = router.route("find the deck and email it to Maria", role="admin")
    assert d.intents == ["ACTION", "SEARCH"] and d.reason_code.value == "confident_compound"
    assert d.trace[2].detail == {"threshold": 0.75, "pair_confidence": 0.95}
    assert d.skills.required == ["action", "retrieval"]


def test_out_of_scope_loads_no_skill(router):
    d = router.route("thanks, that's all", role="admin")
    assert d.intent is None and (d.source, d.reason_code.value) == ("classifier", "out_of_scope")
    assert d.scope.signals == ["classifier"] and d.scope.out_of_scope_probability == 0.9
    assert d.skills.required == [] and d.servable and not d.requires_confirmation


def test_the_distance_alone_calls_a_message_out_of_scope():
    r = make_router()
    r.classifier.distance_threshold = 0.5  # read at every message
    r.classifier.answers["restart the indexing service"] = replace(answer(ACTION=0.92), distance=0.8)
    d = r.route("restart the indexing service", role="admin")
    assert d.reason_code.value == "out_of_scope" and d.scope.signals == ["distance"]


def test_a_continuation_without_a_previous_turn_needs_context(router):
    d = router.route("yes, do it", role="admin")
    assert d.intent is None and d.reason_code.value == "needs_context"
    assert d.skills.required == [] and ("conversation", "no_context") in stages(d)


def test_a_continuation_takes_the_previous_decisions_intents_and_confirmation(router):
    first = router.route("restart the indexing service", role="admin")
    d = router.route("yes, do it", role="admin", previous=first)
    assert (d.intent, d.source, d.reason_code.value) == ("ACTION", "classifier", "follow_up")
    assert d.requires_confirmation and d.skills.required == ["action"]
    (step,) = [s for s in d.trace if (s.stage, s.status) == ("conversation", "continuation")]
    assert step.detail == {"intents": ["ACTION"], "from": "previous_decision"}


def test_a_continuation_given_only_the_previous_message_routes_that_message(router):
    d = router.route("yes, do it", role="admin", context="restart the indexing service")
    assert (d.intent, d.reason_code.value) == ("ACTION", "follow_up")
    (step,) = [s for s in d.trace if (s.stage, s.status) == ("conversation", "continuation")]
    assert step.detail["from"] == "previous_message"
    assert router.classifier.seen == ["yes, do it", "restart the indexing service"]


def test_social_after_an_action_gets_no_skill_and_no_confirmation(router):
    first = router.route("restart the indexing service", role="admin")
    d = router.route("thanks, that's all", role="admin", previous=first)
    assert d.intent is None and d.reason_code.value == "out_of_scope"
    assert d.skills.required == [] and d.skills.optional == [] and not d.requires_confirmation
    assert d.conversation_intents == ["ACTION"]  # kept for a continuation after it
    assert ("conversation", "prior") in stages(d)


def test_rbac_denies_a_required_skill(router):
    d = router.route("restart the indexing service", role="viewer")
    assert d.intent == "ACTION" and not d.servable
    assert [(x.skill, x.required) for x in d.denied if x.required] == [("action", True)]
    assert "role 'viewer' is denied required skill(s) action" in d.message
    assert stages(d)[-1] == ("rbac", "required_denied") and "action" in d.trace[-1].detail["denied"]


def test_the_guardrail_stops_messages_before_the_classifier(router):
    low, bad, ok = router.route_batch(["!!!", None, "a very long message"], role="admin")
    assert low.reason_code.value == "low_signal" and low.servable
    assert bad.reason_code.value == "invalid_input" and not bad.servable
    assert ok.input.truncated_tokens and ok.intent == "PLANNING"
    assert router.classifier.seen == ["a very long message"]


def test_a_message_the_classifier_cannot_take_costs_only_its_own_decision(router):
    bad, good = router.route_batch(["unknown text", "restart the indexing service"], role="admin")
    assert bad.reason_code.value == "invalid_input" and "KeyError" in bad.trace[0].detail["why"]
    assert good.intent == "ACTION"


def test_repaired_surrogates_and_cut_characters_are_in_the_input_and_trace():
    r = make_router(config_with(max_chars=20))
    r.classifier.answers["restart the index\ufffd s"] = answer(ACTION=0.92)  # the first 20 characters
    d = r.route("restart the index\ud800 service", role="admin")
    assert d.input.chars == 26 and d.input.truncated_chars and not d.input.truncated_tokens
    assert d.trace[0].detail == {"repaired_surrogates": 1}
