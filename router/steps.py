"""The trace of a Decision: its steps as the plain dicts the Decision validates once (router.decision).

The stages build the Decision's parts as dicts and lists (InputInfo, Latency, Scope, TraceStep,
RankedIntent) and validate them together: one call into pydantic-core instead of about fifteen model
constructors a message (docs/speed.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from router.classification import Classification
from router.intents import OUT_OF_SCOPE, RESERVED

if TYPE_CHECKING:
    from router.message import Intake


def step(stage: str, status: str, detail: dict | None = None, ms: float = 0.0) -> dict:
    """A TraceStep, as the dict the Decision validates."""
    return {"stage": stage, "status": status, "ms": ms, "detail": {} if detail is None else detail}


def guardrail_step(intake: Intake) -> dict:
    """The guardrail's verdict on a message (router.message.admit), with the surrogates it repaired."""
    if intake.invalid is not None:
        status, detail = "invalid_input", {"why": intake.invalid}
    elif intake.low_signal is not None:
        status, detail = "low_signal", {"why": intake.low_signal}
    else:
        status, detail = "pass", {}
    if intake.repaired:
        detail["repaired_surrogates"] = intake.repaired
    return step("guardrail", status, detail)


def classifier_step(c: Classification) -> dict:
    """What the classifier read, before any conversation prior: its top label and the message's tokens."""
    detail = {"label": c.label, "confidence": round(c.confidence, 6), "tokens": c.num_tokens}
    return step("classifier", "ok", detail, round(c.tokenize_ms + c.inference_ms, 4))


def compound_step(c: Classification) -> dict:
    """The compound rule's verdict (router.compound), with the scores and clauses it read."""
    return step(
        "compound",
        "two_intents" if len(c.intents) > 1 else "single",
        {
            "intents": list(c.intents),
            "scores": {k: round(v, 6) for k, v in (c.intent_scores or {}).items()},
            "clauses": c.clauses,
        },
    )


def ranking(c: Classification) -> list[dict]:
    """The RankedIntent entries: the intents (not the reserved labels), most probable first."""
    return [{"intent": label, "probability": p} for label, p in c.ranking if label not in RESERVED]


def scope_of(c: Classification, threshold: float, limit: float | None) -> dict:
    """The Scope of a message: the out-of-scope signals, the trained class at or above ``threshold`` and
    the in-scope distance above its own ``limit``."""
    signals = []
    if c.label == OUT_OF_SCOPE and c.confidence >= threshold:
        signals.append("classifier")
    if c.distance is not None and limit is not None and c.distance > limit:
        signals.append("distance")
    return {
        "out_of_scope_probability": dict(c.ranking).get(OUT_OF_SCOPE),
        "distance": c.distance,
        "distance_threshold": limit,
        "signals": signals,
    }
