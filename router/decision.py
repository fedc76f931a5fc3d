"""The routing Decision: what a service gets back for one message."""

from __future__ import annotations

import json
from collections.abc import Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

# "examples": an intent the model does not predict, defined by examples in the router config (router.examples)
Source = Literal["classifier", "verifier", "fallback", "guardrail", "examples"]


class ReasonCode(str, Enum):
    CONFIDENT = "confident"  # classifier confidence >= threshold
    VERIFIED = "verified"  # below threshold, the verifier chose the intent
    FOLLOW_UP_KEPT_PREVIOUS = (
        "follow_up_kept_previous"  # verifier: same-domain follow-up, previous intent kept
    )
    NO_VERIFIER = "no_verifier"  # below threshold and no verifier configured
    VERIFIER_FAILED = "verifier_failed"  # verifier timed out, errored or answered invalid output
    VERIFIER_CIRCUIT_OPEN = "verifier_circuit_open"  # verifier skipped: circuit breaker open
    LOW_SIGNAL = "low_signal"  # guardrail: empty, punctuation/emoji-only or random characters
    INVALID_INPUT = "invalid_input"  # guardrail: not a str, or text the tokenizer could not take
    OUT_OF_SCOPE = "out_of_scope"  # none of the model's intents (chit-chat): no skill, reply directly
    FOLLOW_UP_UNVERIFIED = "follow_up_unverified"  # out of scope or unsure, no verifier: previous intent kept
    CONFIDENT_COMPOUND = (
        "confident_compound"  # two requested intents are sure enough together (router.compound)
    )
    FOLLOW_UP = "follow_up"  # a continuation, read in context: the conversation's intents
    NEEDS_CONTEXT = "needs_context"  # a continuation with no previous turn to read it with: no skill
    CLARIFY = "clarify"  # unsure, no verifier answer and no fallback intents: no skill, ask the user
    MATCHED_EXAMPLES = "matched_examples"  # an intent defined by examples: its nearest example reached it
    UNSUPPORTED_LANGUAGE = "unsupported_language"  # in a language the model does not read, no verifier answer


# the message of a ``clarify`` Decision, for a caller that reads only the message
OUT_OF_SCOPE_MESSAGE = "out of scope: the message needs no skill; reply directly without loading any"
CLARIFY_MESSAGE = (
    "unsure of the intent, with no verifier answer and no fallback intents: no skills are loaded; ask the "
    "user what they need"
)


class RankedIntent(BaseModel):
    intent: str
    probability: float


class DeniedSkill(BaseModel):
    skill: str
    required: bool
    reason: str


class GrantedSkills(BaseModel):
    required: list[str] = Field(default_factory=list)
    optional: list[str] = Field(default_factory=list)

    @property
    def all(self) -> list[str]:
        return self.required + self.optional


class Latency(BaseModel):
    tokenize_ms: float = 0.0
    inference_ms: float = 0.0
    verifier_ms: float = 0.0
    total_ms: float = 0.0


class TraceStep(BaseModel):
    stage: str
    status: str
    ms: float = 0.0
    detail: dict[str, Any] = Field(default_factory=dict)


class InputInfo(BaseModel):
    chars: int
    truncated_chars: bool = False
    truncated_tokens: bool = False


class ToolPick(BaseModel):
    """A tool of the registry picked for the message (router.tools.stage)."""

    name: str
    skill: str
    score: float = Field(description="BM25 score of the tool's words against the message.")
    requires_confirmation: bool = False
    tokens: int = Field(description="Estimated context tokens of its definition (characters / 4).")


class ToolSelection(BaseModel):
    """The few tools of the granted skills the message needs, out of the tool registry."""

    tools: list[ToolPick] = Field(default_factory=list, description="Best first; at most the config's k.")
    none_applies: bool = Field(
        description="No tool of the granted skills scored above the config's min_score: load none."
    )
    candidates: int = Field(description="Tools of the granted skills the role may use.")
    tokens_loaded: int = Field(description="Estimated tokens of the picked tools' definitions.")
    tokens_saved: int = Field(description="Estimated tokens of the candidates' definitions not loaded.")


class Scope(BaseModel):
    """The out-of-scope signals for one message: the trained class and the in-scope distance."""

    out_of_scope_probability: float | None = None
    distance: float | None = None
    distance_threshold: float | None = None
    signals: list[Literal["classifier", "distance", "verifier"]] = Field(
        default_factory=list, description="Which signals judged the message out of scope."
    )


class Decision(BaseModel):
    """Routing outcome for one message. ``intent`` is None for guardrail, out-of-scope and fallback
    decisions (the fallback's skills are those of ``fallback_intents``). ``intents`` lists every intent
    the message asks for, primary first: two for a compound request ("find the deck and email it")."""

    intent: str | None = Field(description="The primary intent (the first of ``intents``).")
    intents: list[str] = Field(
        default_factory=list,
        description="Every intent routed, primary first; skills are the union of theirs. Empty when intent is None.",
    )
    conversation_intents: list[str] = Field(
        default_factory=list,
        description="The intents of the conversation after this turn: what a continuation of it takes. "
        "This turn's intents, or, for a turn without any (small talk, a fallback), the previous turn's.",
    )
    confidence: float | None = Field(
        description="Calibrated probability of the classifier's top label (an intent, out of scope, or a "
        "continuation of the previous turn); after a previous turn, as read with the conversation's prior "
        "(router.conversation.with_prior)."
    )
    ranking: list[RankedIntent] = Field(
        default_factory=list, description="The model's intents by calibrated probability."
    )
    scope: Scope | None = None
    source: Source
    reason_code: ReasonCode
    role: str
    skills: GrantedSkills
    denied: list[DeniedSkill] = Field(default_factory=list)
    servable: bool = Field(
        description="False when a required skill was denied: the request cannot be served as classified."
    )
    message: str = ""
    requires_confirmation: bool = False
    context_budget: int = 0
    threshold: float = Field(
        description="The confidence threshold applied to the decision's intent: its own (config "
        "``thresholds``), else the router's."
    )
    model_id: str
    input: InputInfo
    latency: Latency = Field(default_factory=Latency)
    tools: ToolSelection | None = Field(
        None, description="The tools picked out of the tool registry; null when the router has none."
    )
    trace: list[TraceStep] = Field(default_factory=list)

    def brief(self) -> dict:
        """The one-line view the CLI prints per message (not part of the JSON schema)."""
        skills = ",".join(self.skills.required) + (
            "+" + ",".join(self.skills.optional) if self.skills.optional else ""
        )
        return {
            "intent": "+".join(self.intents) if self.intents else "-",
            "confidence": round(self.confidence, 3) if self.confidence is not None else None,
            "source": self.source,
            "reason": self.reason_code.value,
            "skills": skills,
            "confirm": self.requires_confirmation,
            "servable": self.servable,
            "ms": round(self.latency.total_ms, 3),
        }


def decision_json_schema(intents: Sequence[str] | None = None) -> dict:
    """The Decision's JSON Schema. With ``intents`` (a model's, router.intents.intents_of), every intent
    field is an enum of them; without, any string."""
    schema = Decision.model_json_schema()
    if intents is not None:
        name_intents(schema, schema["$defs"]["RankedIntent"], intents)
    return schema


def name_intents(decision: dict, ranked: dict, intents: Sequence[str]) -> None:
    """Turn the intent fields of a Decision's and a RankedIntent's JSON Schemas (as pydantic writes them)
    into enums of ``intents``, in place."""
    enum = {"type": "string", "enum": list(intents)}
    props = decision["properties"]
    props["intent"]["anyOf"] = [enum, {"type": "null"}]
    for name in ("intents", "conversation_intents"):
        props[name]["items"] = dict(enum)
    ranked["properties"]["intent"].update(enum)


def write_json_schema(path: str | Path, intents: Sequence[str] | None = None) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(decision_json_schema(intents), indent=2) + "\n", encoding="utf-8")
    return path
