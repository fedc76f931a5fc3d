"""Out of scope through route(): the shipped model's OUT_OF_SCOPE class, the in-scope distance,
follow-ups with and without a real verifier on 127.0.0.1, and the gate on an out-of-scope regression."""

import json

import numpy as np
import pytest

from router.classifier import Classifier
from router.routing import Router
from router.verifier import LLMVerifier, VerifierSettings
from tests.conftest import ROOT, SHIPPED
from tests.openai_server import OpenAIServer


@pytest.fixture(scope="module")
def router():
    return Router.load(SHIPPED)


@pytest.fixture
def verifier_server():
    with OpenAIServer().start() as server:
        yield server


def _verifier(server):
    return LLMVerifier(VerifierSettings(base_url=server.base_url, model="m", timeout=2.0))


def test_shipped_model_calls_out_of_scope_by_its_trained_class(router):
    """The default model is built without the in-scope distance (training/configs/default.yaml): its
    OUT_OF_SCOPE class decides. A model built with one has both signals (the tiny model, below)."""
    assert "OUT_OF_SCOPE" in router.classifier.labels
    assert router.classifier.distance_threshold is None


@pytest.mark.parametrize("text", ["hi there!", "thanks so much 🙏", "are you a bot?", "see you tomorrow"])
def test_chit_chat_is_out_of_scope_with_no_skills(router, text):
    d = router.route(text, role="admin")
    assert d.reason_code.value == "out_of_scope", (text, d.ranking, d.scope)
    assert d.intent is None and d.skills.all == [] and d.denied == [] and d.servable
    assert d.source == "classifier" and d.scope.signals and "reply directly" in d.message
    assert all(r.intent != "OUT_OF_SCOPE" for r in d.ranking)  # the ranking holds the five intents
    assert [s.stage for s in d.trace][-1] == "scope"


@pytest.mark.parametrize(
    "text, intent",
    [
        ("thanks, can you also send it to maria", "ACTION"),
        ("hi, where is the travel policy", "SEARCH"),
        ("what did I thank you for earlier", "MEMORY"),
    ],
)
def test_chit_chat_with_a_request_stays_in_scope(router, text, intent):
    d = router.route(text, role="admin")
    assert d.reason_code.value != "out_of_scope", (text, d.scope)
    assert d.ranking[0].intent == intent


@pytest.mark.slow
def test_distance_signal_alone_calls_a_message_out_of_scope(tiny_exported, router):
    """With a distance threshold below every message, a confident ACTION request is out of scope by the
    distance signal alone (the trained class does not fire)."""
    clf = Classifier(tiny_exported[0])
    assert clf.distance_threshold is not None  # the tiny model is built with the distance
    clf.distance_threshold = 1e-6
    d = Router(clf, router.config).route("restart the indexing service", role="admin")
    assert d.reason_code.value == "out_of_scope" and d.scope.signals == ["distance"]
    assert d.scope.distance > d.scope.distance_threshold


def test_a_bare_yes_continues_the_previous_turn_and_needs_it(router):
    prev = router.route("draft a step by step plan for migrating our wiki to confluence", role="analyst")
    assert prev.intent == "PLANNING"
    d = router.route("yes", role="analyst", previous=prev)
    assert d.intent == "PLANNING" and d.reason_code.value == "follow_up"
    assert d.skills.required == prev.skills.required
    alone = router.route("yes", role="analyst")  # without a previous turn there is nothing to continue
    assert alone.intent is None and alone.reason_code.value == "needs_context" and alone.skills.all == []


def test_an_unsure_follow_up_goes_to_the_verifier_which_sees_the_previous_turn(router, verifier_server):
    verifier_server.push('{"intent": "PLANNING", "reason_code": "same_domain_follow_up"}')
    # a threshold above the continuation's confidence: the message is unsure, and leans to a continuation
    r = Router(router.classifier, router.config, verifier=_verifier(verifier_server), threshold=0.9999)
    prev = router.route("draft a step by step plan for migrating our wiki to confluence", role="analyst")
    d = r.route("ok do it", role="analyst", previous=prev, context="draft a step by step plan for the wiki")
    assert (d.intent, d.source, d.reason_code.value) == (
        "PLANNING",
        "verifier",
        "follow_up_kept_previous",
    )
    sent = verifier_server.chat_requests()
    body = json.dumps(sent[0].body)
    assert len(sent) == 1 and "PLANNING" in body  # the previous decision is in the prompt
    assert "draft a step by step plan for the wiki" in body  # and the previous message


def test_small_talk_after_a_request_stays_out_of_scope_without_a_verifier_call(router, verifier_server):
    r = Router(router.classifier, router.config, verifier=_verifier(verifier_server))
    prev = router.route("find the 2025 travel policy", role="viewer")
    d = r.route("haha nice", role="viewer", previous=prev)
    assert (d.intent, d.source, d.reason_code.value) == (None, "classifier", "out_of_scope")
    assert d.skills.all == [] and verifier_server.chat_requests() == []


def test_verifier_may_answer_out_of_scope(router, verifier_server):
    verifier_server.push('{"intent": "OUT_OF_SCOPE", "reason_code": "other"}')
    r = Router(router.classifier, router.config, verifier=_verifier(verifier_server), threshold=0.9999)
    prev = router.route("find the 2025 travel policy", role="viewer")
    d = r.route("could you maybe look into it", role="viewer", previous=prev)
    assert (d.intent, d.source, d.reason_code.value) == (None, "verifier", "out_of_scope")
    assert d.skills.all == [] and "verifier" in d.scope.signals


def test_chit_chat_without_previous_never_reaches_the_verifier(router, verifier_server):
    r = Router(router.classifier, router.config, verifier=_verifier(verifier_server))
    d = r.route("good morning team!", role="viewer")
    assert d.reason_code.value == "out_of_scope" and verifier_server.chat_requests() == []


def test_gate_fails_on_an_out_of_scope_regression(tmp_path):
    from eval.metrics.evaluator import run_evaluation
    from eval.reports.gate import gate_passed, make_baseline, run_gate

    rows = [json.loads(l) for l in (ROOT / "data" / "test.jsonl").read_text().splitlines()]
    sample = [r for r in rows if r["label"] == "OUT_OF_SCOPE"][:40] + [
        r for r in rows if r["label"] != "OUT_OF_SCOPE"
    ][:80]
    data = tmp_path / "sample.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in sample), encoding="utf-8")
    report = run_evaluation(SHIPPED, data, max_latency_samples=0)
    baseline = make_baseline(report)
    assert set(baseline["scope"]) >= {"in_scope_called_out_of_scope", "out_of_scope_not_routed"}
    assert gate_passed(run_gate(report, baseline))
    worse = json.loads(json.dumps(report))
    worse["scope"]["out_of_scope"]["not_routed"] -= 0.05
    failed = [c.name for c in run_gate(worse, baseline) if not c.passed]
    assert failed == ["scope.out_of_scope_not_routed"]
    lost = json.loads(json.dumps(report))
    lost["scope"]["in_scope"]["called_out_of_scope"] += 0.05
    assert [c.name for c in run_gate(lost, baseline) if not c.passed] == [
        "scope.in_scope_called_out_of_scope"
    ]


@pytest.mark.slow
def test_graph_distance_equals_pytorch_distance(tiny_exported):
    from training.fit.intent_model import IntentModel

    out, manifest = tiny_exported
    texts = ["hello there", "find the vpn guide", "restart the staging cluster", "lol ok", "why did q3 dip"]
    torch_model = IntentModel.load(out / "checkpoint", manifest=manifest)
    expected = torch_model.in_scope_distance(texts)
    probs, got = Classifier(out, variant="fp32").predict(texts)
    np.testing.assert_allclose(got, expected, rtol=1e-3)
    np.testing.assert_allclose(probs, torch_model.predict_proba(texts), atol=1e-4)
    assert manifest.in_scope.threshold == pytest.approx(torch_model.distance_threshold)
