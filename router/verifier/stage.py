"""The verifier stage of route(): below the threshold, ask the configured verifier (router.verifier) which
intent a message has, with the previous turn when there is one; every failure becomes a fallback reason."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from router.classification import Classification
from router.conversation import Context, Turn
from router.decision import ReasonCode
from router.intents import OUT_OF_SCOPE
from router.steps import step
from router.verifier.base import VerifierError, VerifierUnavailable


def check_verifier(verifier, intents: tuple[str, ...]) -> None:
    """Raise ValueError when ``verifier`` chooses among intents (``.intents``, router.verifier.base.Verifier)
    that are not the model's ``intents``."""
    known = verifier.intents if verifier is not None else None
    if known is not None and set(known) != set(intents):
        raise ValueError(
            f"the verifier chooses among {', '.join(known)}; the model's intents are {', '.join(intents)}: "
            "give the verifier the model's intent definitions (an intents file, or a 'description' for "
            "each intent of the router config)"
        )


@dataclass(frozen=True)
class Verification:
    """What the verifier stage concluded: the intent (None when it gave none the router can use), the
    Decision's source and reason, the second intent of a compound request, the stage's trace step, and
    the time spent in the verifier (None when there is no verifier)."""

    intent: str | None
    source: str
    reason: ReasonCode
    step: dict
    secondary: str | None = None
    ms: float | None = None


def verify_stage(
    verifier,
    text: str,
    c: Classification,
    turn: Turn,
    read_context: Callable[[], Context | None],
    intents: tuple[str, ...],
) -> Verification:
    """Ask ``verifier`` for the intent of ``text``, with the previous turn when there is one.
    ``read_context()`` gives the conversation (router.conversation.Context), or None, for a verifier that
    calls the message a same-domain follow-up; it is called only then. An answer outside the model's
    ``intents`` (and out of scope) fails."""
    if verifier is None:
        return Verification(None, "fallback", ReasonCode.NO_VERIFIER, step("verifier", "absent"))
    t0 = time.perf_counter()
    try:
        res = verifier.verify(text, c, turn.previous, turn.context)
    except Exception as e:  # a third-party verifier must not take the router down either
        return _failed(e, round((time.perf_counter() - t0) * 1000, 4))
    ms = round((time.perf_counter() - t0) * 1000, 4)
    ctx = read_context() if res.reason_code == "same_domain_follow_up" else None
    detail = {
        "intent": res.intent,
        "reason_code": res.reason_code,
        "attempts": res.attempts,
        "breaker": res.breaker,
    }
    if ctx is not None:
        detail["kept_previous"] = ctx.intents[0]
        accepted = step("verifier", "accepted", detail, ms)
        return Verification(
            ctx.intents[0], "verifier", ReasonCode.FOLLOW_UP_KEPT_PREVIOUS, accepted, ctx.secondary, ms
        )
    if res.intent not in intents and not (
        res.intent == OUT_OF_SCOPE and res.reason_code != "same_domain_follow_up"
    ):
        invalid = step("verifier", "invalid_intent", {"intent": res.intent, "attempts": res.attempts}, ms)
        return Verification(None, "fallback", ReasonCode.VERIFIER_FAILED, invalid, ms=ms)
    secondary = getattr(res, "secondary", None)
    secondary = secondary if secondary in intents and secondary != res.intent else None
    if secondary:
        detail["secondary"] = secondary
    accepted = step("verifier", "accepted", detail, ms)
    if res.intent == OUT_OF_SCOPE:
        return Verification(None, "verifier", ReasonCode.OUT_OF_SCOPE, accepted, ms=ms)
    return Verification(res.intent, "verifier", ReasonCode.VERIFIED, accepted, secondary, ms)


def _failed(e: Exception, ms: float) -> Verification:
    """A verifier that raised: its error in the trace, and the fallback."""
    if isinstance(e, VerifierError):
        detail = {"error": str(e), "breaker": e.breaker, "attempts": e.attempts}
        status = e.status
    else:
        detail, status = {"error": f"{type(e).__name__}: {e}"}, "error"
    reason = (
        ReasonCode.VERIFIER_CIRCUIT_OPEN if isinstance(e, VerifierUnavailable) else ReasonCode.VERIFIER_FAILED
    )
    return Verification(None, "fallback", reason, step("verifier", status, detail, ms), ms=ms)
