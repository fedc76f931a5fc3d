"""The verifier stage of route(): below the threshold, ask the configured verifier (router.verifier) which
intent a message has, with the previous turn when there is one; every failure becomes a fallback reason."""

from __future__ import annotations

import time

from router.classifier import Classification
from router.decision import ReasonCode
from router.intents import OUT_OF_SCOPE
from router.steps import step
from router.verifier.base import VerifierError, VerifierUnavailable


def check_verifier(verifier, intents: tuple[str, ...]) -> None:
    """Raise ValueError when ``verifier`` says which intents it chooses among (``.intents``, as
    router.verifier.LLMVerifier does) and they are not the model's ``intents``."""
    known = getattr(verifier, "intents", None)
    if known is not None and set(known) != set(intents):
        raise ValueError(
            f"the verifier chooses among {', '.join(known)}; the model's intents are {', '.join(intents)}: "
            "give the verifier the model's intent definitions (an intents file, or a 'description' for "
            "each intent of the router config)"
        )


def verify_stage(
    verifier,
    text: str,
    c: Classification,
    turn: tuple,
    trace: list,
    latency: dict,
    read_context,
    intents: tuple[str, ...],
):
    """(intent or None, source, reason, secondary intent or None). ``turn`` is (previous Decision, previous
    message, role); ``read_context()`` gives the conversation's router.conversation.Context, or None,
    for a verifier that calls the message a same-domain follow-up. An answer outside the model's
    ``intents`` (and out of scope) fails."""
    previous, context, _ = turn
    if verifier is None:
        trace.append(step("verifier", "absent"))
        return None, "fallback", ReasonCode.NO_VERIFIER, None
    t0 = time.perf_counter()
    try:
        # the previous message goes to the verifier only when there is one: a verifier written before
        # ``context`` existed keeps working
        extra = {"context": context} if context else {}
        res = verifier.verify(text, c, previous, **extra)
    except Exception as e:  # a third-party verifier must not take the router down either
        ms = round((time.perf_counter() - t0) * 1000, 4)
        latency["verifier_ms"] = ms
        if isinstance(e, VerifierError):
            detail = {"error": str(e), "breaker": e.breaker, "attempts": e.attempts}
            status = e.status
        else:
            detail, status = {"error": f"{type(e).__name__}: {e}"}, "error"
        trace.append(step("verifier", status, detail, ms))
        reason = (
            ReasonCode.VERIFIER_UNAVAILABLE
            if isinstance(e, VerifierUnavailable)
            else ReasonCode.VERIFIER_FAILED
        )
        return None, "fallback", reason, None
    ms = (time.perf_counter() - t0) * 1000
    latency["verifier_ms"] = round(ms, 4)
    ctx = read_context() if res.reason_code == "same_domain_follow_up" else None
    detail = {
        "intent": res.intent,
        "reason_code": res.reason_code,
        "attempts": res.attempts,
        "breaker": res.breaker,
    }
    if ctx is not None:
        detail["kept_previous"] = ctx.intents[0]
        trace.append(step("verifier", "accepted", detail, round(ms, 4)))
        return ctx.intents[0], "verifier", ReasonCode.FOLLOW_UP, ctx.secondary
    if res.intent not in intents and not (
        res.intent == OUT_OF_SCOPE and res.reason_code != "same_domain_follow_up"
    ):
        detail = {"intent": res.intent, "attempts": res.attempts}
        trace.append(step("verifier", "invalid_intent", detail, round(ms, 4)))
        return None, "fallback", ReasonCode.VERIFIER_FAILED, None
    secondary = getattr(res, "secondary", None)
    secondary = secondary if secondary in intents and secondary != res.intent else None
    if secondary:
        detail["secondary"] = secondary
    trace.append(step("verifier", "accepted", detail, round(ms, 4)))
    if res.intent == OUT_OF_SCOPE:
        return None, "verifier", ReasonCode.OUT_OF_SCOPE, None
    return res.intent, "verifier", ReasonCode.VERIFIED, secondary
