"""Shared pieces of the verifier tests: the test key, a below-threshold classification, helpers."""

from router.classifier import Classification
from router.decision import Decision, GrantedSkills, InputInfo, ReasonCode
from router.verifier import VerifierError, VerifierResult

KEY = "sk-test-SECRET-0123456789abcdef"
CLS = Classification(
    label="SEARCH",
    confidence=0.41,
    ranking=[("SEARCH", 0.41), ("REASONING", 0.33), ("PLANNING", 0.12), ("MEMORY", 0.08), ("ACTION", 0.06)],
)
ENV_VARS = (
    "INTENT_ROUTER_VERIFIER_URL",
    "INTENT_ROUTER_VERIFIER_MODEL",
    "INTENT_ROUTER_VERIFIER_API_KEY",
    "OPENAI_API_KEY",
    "INTENT_ROUTER_VERIFIER_TIMEOUT",
    "INTENT_ROUTER_VERIFIER_DEADLINE",
    "INTENT_ROUTER_VERIFIER_API_KEY_ENV",
    "INTENT_ROUTER_VERIFIER_ALLOW_INSECURE_KEY",
)


def previous_decision(intent="SEARCH") -> Decision:
    return Decision(
        intent=intent,
        confidence=0.9,
        source="classifier",
        reason_code=ReasonCode.CONFIDENT,
        role="viewer",
        skills=GrantedSkills(required=["retrieval"]),
        servable=True,
        threshold=0.75,
        model_id="test",
        input=InputInfo(chars=10),
    )


def system_prompt(req):
    return req.body["messages"][0]["content"]


def user_prompt(req):
    return req.body["messages"][-1]["content"]


def statuses(attempts):
    return [a["status"] for a in attempts]


class OracleVerifier:
    """Answers the true label for known texts, fails on others."""

    intents = None  # takes whatever intents it is asked about

    def __init__(self, truth):
        self.truth = truth

    def verify(self, text, classification, previous=None, context=None):
        if text not in self.truth:
            raise VerifierError("no idea", status="timeout")
        return VerifierResult(intent=self.truth[text])
