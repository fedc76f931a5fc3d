"""Router decisions: skills, RBAC, threshold, verifier fallback and the guardrail."""

from pathlib import Path

import pytest

from router.config import RouterConfig
from router.routing import Router
from router.verifier import VerifierError, VerifierResult
from tests.conftest import ROOT, VAGUE, below_threshold


def _load_without_distance(model_dir, **kw) -> Router:
    """The tiny fixture model's in-scope distance is fitted on ten dev rows and calls most messages out
    of scope; these tests force the threshold/verifier/fallback path, so they route without it (the
    distance has its own tests in tests/test_out_of_scope.py)."""
    r = Router.load(model_dir, **kw)
    r.classifier.distance_threshold = None
    return r


@pytest.fixture(scope="module")
def tiny_router(tiny_exported):
    model_dir, _ = tiny_exported
    return Router.load(model_dir)


class FixedVerifier:
    """A verifier that always answers the same intent: stands in for an LLM where the LLM is not under test."""

    intents = None  # takes whatever intents it is asked about

    def __init__(self, intent, reason_code="fresh_request"):
        self.intent, self.reason_code, self.calls = intent, reason_code, 0

    def verify(self, text, classification, previous=None, context=None):
        self.calls += 1
        return VerifierResult(intent=self.intent, reason_code=self.reason_code)


class FailingVerifier:
    intents = None  # takes whatever intents it is asked about

    def __init__(self, exc):
        self.exc, self.calls = exc, 0

    def verify(self, text, classification, previous=None, context=None):
        self.calls += 1
        raise self.exc


# ------------------------------------------------------------------ design-record cases (shipped model)
def test_search_gives_retrieval_and_reflection(shipped_router):
    d = shipped_router.route("pull up the travel expense policy for international trips", role="admin")
    assert (d.intent, d.source) == ("SEARCH", "classifier")
    assert d.confidence >= 0.75
    assert d.skills.required == ["retrieval"] and d.skills.optional == ["reflection"]
    assert d.context_budget == 2000 and d.servable and not d.requires_confirmation


def test_planning_gives_planner_retrieval_synthesis(shipped_router):
    d = shipped_router.route(
        "draft a rollout plan with milestones for moving our payroll to the new provider by march",
        role="analyst",
    )
    assert d.intent == "PLANNING" and d.source == "classifier"
    assert sorted(d.skills.required) == ["planner", "retrieval", "synthesis"]
    assert d.context_budget == 3500 and d.servable


def test_viewer_never_gets_action(shipped_router):
    d = shipped_router.route("restart the indexing service on prod now please", role="viewer")
    assert d.intent == "ACTION"
    assert "action" not in d.skills.all
    denied = {x.skill: x for x in d.denied}
    assert denied["action"].required and "viewer" in denied["action"].reason
    assert not d.servable and "cannot be served as classified" in d.message
    assert not d.requires_confirmation


def test_admin_action_requires_confirmation(shipped_router):
    d = shipped_router.route("restart the indexing service on prod now please", role="admin")
    assert d.intent == "ACTION" and d.skills.required == ["action"] and d.requires_confirmation


def test_below_threshold_without_verifier_gives_retrieval_and_synthesis(tiny_exported):
    model_dir, _ = tiny_exported
    r = _load_without_distance(model_dir, threshold=1.0)
    text = below_threshold(r)
    d = r.route(text, role="analyst")
    assert (d.source, d.reason_code.value, d.intent) == ("fallback", "no_verifier", None)
    assert d.skills.required == ["retrieval", "synthesis"] and d.skills.optional == []
    assert d.context_budget == 3000
    fallback = next(s for s in d.trace if s.stage == "fallback")
    fallback.detail["intents"].append("ACTION")  # a caller's change stays in its own decision
    assert r.config.fallback_intents == ["SEARCH", "REASONING"]
    d = r.route(text, role="admin")
    assert d.skills.required == ["retrieval", "synthesis"] and d.skills.optional == ["reflection"]


# ------------------------------------------------------------------------------------ fail closed
def test_unknown_role_gets_nothing(tiny_router):
    d = tiny_router.route("find the expense policy", role="superuser")
    assert d.skills.all == []
    assert d.denied and all("unknown role 'superuser'" in x.reason for x in d.denied)
    assert not d.servable


def test_decisions_share_no_skill_lists_and_unknown_roles_are_not_kept(shipped_router):
    # a router works a role's skills out once per intents: what a caller does to one decision must not
    # reach the next one of the same role and intent
    text = "restart the indexing service on prod now please"
    a = shipped_router.route(text, role="viewer")
    before = a.model_dump()
    a.skills.optional.append("action")
    a.denied[0].reason = "changed"
    a.trace[-1].detail["granted"].append("action")
    a.trace[-1].detail["denied"].clear()
    b = shipped_router.route(text, role="viewer")
    for key in ("skills", "denied", "message", "servable", "context_budget"):
        assert b.model_dump()[key] == before[key]
    assert b.trace[-1].detail == before["trace"][-1]["detail"]
    kept = len(shipped_router._grants)
    for i in range(20):
        assert shipped_router.route(text, role=f"stranger-{i}").skills.all == []
    assert len(shipped_router._grants) == kept


def test_skill_missing_from_registry_is_denied(tiny_exported):
    model_dir, _ = tiny_exported
    cfg = RouterConfig.load()
    cfg.intents["SEARCH"].optional = ["reflection", "web_browse"]
    cfg.intents["ACTION"].optional = ["reflection", "web_browse"]
    cfg.intents["REASONING"].optional = ["web_browse"]
    r = _load_without_distance(model_dir, config=cfg, threshold=1.0)
    d = r.route(below_threshold(r), role="admin")
    denied = {x.skill: x.reason for x in d.denied}
    assert "web_browse" in denied and "not in the skill registry" in denied["web_browse"]
    assert "web_browse" not in d.skills.all and d.servable  # optional denial keeps it servable


def test_role_missing_permission_is_denied(tiny_exported):
    model_dir, _ = tiny_exported
    cfg = RouterConfig.load()
    cfg.roles["viewer"].permissions = []  # skill listed, permission not held
    r = _load_without_distance(model_dir, config=cfg, threshold=1.0)
    d = r.route(below_threshold(r), role="viewer")
    reasons = {x.skill: x.reason for x in d.denied}
    assert "lacks permission(s) read_documents" in reasons["retrieval"]


def test_threshold_out_of_range_is_rejected(tiny_exported):
    model_dir, _ = tiny_exported
    for bad in (0.0, -0.1, 1.01):
        with pytest.raises(ValueError, match="threshold"):
            Router.load(model_dir, threshold=bad)


def test_config_file_threshold_validation(tmp_path):
    text = (
        (Path(ROOT) / "router" / "config" / "default.yaml")
        .read_text()
        .replace("threshold: 0.75", "threshold: 0")
    )
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match="threshold"):
        RouterConfig.load(p)


# ------------------------------------------------------------------------------- verifier paths
def test_confident_message_skips_verifier(tiny_exported):
    model_dir, _ = tiny_exported
    v = FixedVerifier("MEMORY")
    r = Router.load(model_dir, verifier=v, threshold=0.01)
    d = r.route("find the expense policy", role="admin")
    assert d.source == "classifier" and v.calls == 0


def test_verifier_intent_is_used_below_threshold(tiny_exported):
    model_dir, _ = tiny_exported
    r = _load_without_distance(model_dir, verifier=FixedVerifier("MEMORY"), threshold=1.0)
    d = r.route(below_threshold(r), role="researcher")
    assert (d.intent, d.source, d.reason_code.value) == ("MEMORY", "verifier", "verified")
    assert d.skills.required == ["memory"]
    assert [s.stage for s in d.trace] == ["guardrail", "classifier", "threshold", "verifier", "rbac"]


@pytest.mark.parametrize(
    "exc,reason",
    [
        (VerifierError("boom", status="timeout"), "verifier_failed"),
        (RuntimeError("a custom verifier crashed"), "verifier_failed"),
    ],
)
def test_verifier_failure_falls_back(tiny_exported, exc, reason):
    model_dir, _ = tiny_exported
    r = _load_without_distance(model_dir, verifier=FailingVerifier(exc), threshold=1.0)
    d = r.route(below_threshold(r), role="analyst")
    assert (d.source, d.reason_code.value, d.intent) == ("fallback", reason, None)
    assert d.skills.required == ["retrieval", "synthesis"]
    assert any(s.stage == "verifier" and s.status in ("timeout", "error") for s in d.trace)


def test_follow_up_keeps_previous_intent(tiny_exported):
    model_dir, _ = tiny_exported
    r = _load_without_distance(
        model_dir, verifier=FixedVerifier("SEARCH", "same_domain_follow_up"), threshold=1.0
    )
    p = _load_without_distance(model_dir, verifier=FixedVerifier("PLANNING"), threshold=1.0)
    prev = p.route(below_threshold(p), "admin")
    assert prev.intent == "PLANNING"
    d = r.route(below_threshold(r, "and for next week?", *VAGUE), role="admin", previous=prev)
    assert (d.intent, d.reason_code.value) == ("PLANNING", "follow_up_kept_previous")


# -------------------------------------------------------------------------------------- guardrail
@pytest.mark.parametrize(
    "text", ["", "   \n\t", "???", "...!!", "👍👍", "🙂", "asdfgh", "jjjjjjj", "xqzvbn", "dfgdfg sdf"]
)
def test_low_signal_never_reaches_verifier(tiny_exported, text):
    model_dir, _ = tiny_exported
    v = FixedVerifier("ACTION")
    d = _load_without_distance(model_dir, verifier=v, threshold=1.0).route(text, role="admin")
    assert (d.source, d.reason_code.value, d.intent) == ("guardrail", "low_signal", None)
    assert d.skills.all == [] and v.calls == 0


@pytest.mark.parametrize(
    "text", ["k8s", "INC0012345", "restart nginx", "ok", "strengths and weaknesses", "crm pdf", "sql"]
)
def test_real_short_messages_pass_the_guardrail(tiny_router, text):
    assert tiny_router.route(text, role="admin").source != "guardrail"


def test_non_string_input_gets_an_invalid_input_decision(tiny_router):
    ds = tiny_router.route_batch(["fine", 42], role="admin")
    assert len(ds) == 2 and ds[1].reason_code.value == "invalid_input" and ds[1].skills.all == []
    assert tiny_router.route(None, role="admin").reason_code.value == "invalid_input"
    with pytest.raises(TypeError, match="role"):
        tiny_router.route("hello there", role=None)


def test_overlong_input_is_truncated_and_flagged(tiny_router):
    text = "please find the expense policy " * 2000
    d = tiny_router.route(text, role="admin")
    assert d.input.chars == len(text)
    assert d.input.truncated_chars and d.input.truncated_tokens
    assert d.intent is not None or d.source == "fallback"


def test_every_reason_code_is_named_as_its_value():
    """The value is the API (decision logs, the OpenAPI schema); the Python name says the same."""
    from router.decision import ReasonCode

    assert [c.name for c in ReasonCode] == [c.value.upper() for c in ReasonCode]
