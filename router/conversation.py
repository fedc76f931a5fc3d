"""Conversations: a message read with the turn before it (data/INTENTS.md, "In a conversation").

A model trained with the reserved ``CONTINUATION`` label tells three kinds of message apart:
- a *continuation* ("yes, do it", "only the EU ones", "make it next Tuesday", "the second one", "try
  again", "no, the other one") takes the intents of the conversation: those of the previous turn's
  Decision (``conversation_intents``), or, when the caller has only the previous message, that message's
  own routed intents;
- a *social* message (thanks, greetings, farewells, reactions, small talk) stays out of scope whatever came
  before it;
- a message whose own intent is clear keeps it, even right after another request.

The context is looked at only for a continuation: a message with no previous turn, or one that is not a
continuation, costs nothing more. A model without the label (trained before it existed) keeps the older
rule: with a previous turn, a message judged out of scope or unsure goes to the verifier, and without one
keeps the previous intent (``follow_up_unverified``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from router.intents import CONTINUATION, OUT_OF_SCOPE

# Below the threshold, a message "leans" to a continuation when the continuation class is its most
# probable label, or is at least this probable and more probable than out of scope; such a message, with
# a previous turn and no verifier answer, takes the conversation's intents (``follow_up_unverified``).
LEAN = 0.3


@dataclass(frozen=True)
class Context:
    """What a continuation is read with: the conversation's intents, primary first, and where they came
    from (``previous_decision``, or ``previous_message`` when only its text was given and was routed)."""

    intents: tuple[str, ...]
    source: str
    message_chars: int | None = None

    def detail(self) -> dict:
        out: dict = {"intents": list(self.intents), "from": self.source}
        if self.message_chars is not None:
            out["message_chars"] = self.message_chars
        return out


def knows_continuations(labels: Sequence[str]) -> bool:
    """Whether a model can tell a continuation from small talk: it was trained with the label."""
    return CONTINUATION in labels


def is_continuation(label: str, confidence: float, threshold: float) -> bool:
    return label == CONTINUATION and confidence >= threshold


def leans_to_continuation(ranking: Sequence[tuple[str, float]]) -> bool:
    """Below the threshold: the continuation class leads, or is at least LEAN and beats out of scope."""
    if not ranking:
        return False
    probs = dict(ranking)
    p = probs.get(CONTINUATION, 0.0)
    return ranking[0][0] == CONTINUATION or (p >= LEAN and p > probs.get(OUT_OF_SCOPE, 0.0))


def carried_intents(previous) -> list[str]:
    """The conversation's intents after the previous turn (a Decision), or [] without one."""
    if previous is None:
        return []
    intents = previous.conversation_intents or previous.intents
    return [i.value if hasattr(i, "value") else str(i) for i in intents]


def resolve_context(
    previous, message: str | None, route_message: Callable[[str], Sequence[str]]
) -> Context | None:
    """The context of a continuation: the previous Decision's conversation intents; else, given only the
    previous message, its own intents as ``route_message`` routes it (one more graph run, paid only by a
    continuation); None when neither yields an intent."""
    intents = carried_intents(previous)
    if intents:
        return Context(tuple(intents), "previous_decision")
    if message and previous is None:
        routed = list(route_message(message))
        if routed:
            return Context(tuple(routed), "previous_message", len(message))
    return None
