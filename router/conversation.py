"""Conversations: a message read with the turn before it (data/INTENTS.md, "In a conversation").

A model trained with the reserved ``CONTINUATION`` label tells three kinds of message apart:
- a *continuation* ("yes, do it", "only the EU ones", "make it next Tuesday", "the second one", "try
  again", "no, the other one") takes the intents of the conversation: those of the previous turn's
  Decision (``conversation_intents``), or, when the caller has only the previous message, that message's
  own routed intents;
- a *social* message (thanks, greetings, farewells, reactions, small talk) stays out of scope whatever came
  before it;
- a message whose own intent is clear keeps it, even right after another request.

After a turn, a model with a turn reader (router.turn_reader) says which of the three a message not sure
of its own intent is (``read_turn``). A model without one reads its continuation class instead: after a
turn, the odds of a continuation against small talk are those of a conversation, not of the training rows
(``with_prior``). A message that is not sure of its own intent (below the threshold) is
read in context too: its
continuation probability adds to the conversation's intent (``in_context``), so "add a pilot with finance
first" at ACTION 0.5 and CONTINUATION 0.4 after a plan is PLANNING. The context is looked at only for such
messages: a message with no previous turn, or one confident of its own intent or of being small talk,
costs nothing more. A model without the label (trained before it existed) keeps the older
rule: with a previous turn, a message judged out of scope or unsure goes to the verifier, and without one
keeps the previous intent (``follow_up_unverified``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from router.intents import CONTINUATION, OUT_OF_SCOPE
from router.turn_reader import kind_of

if TYPE_CHECKING:
    from router.decision import Decision


@dataclass(frozen=True)
class Turn:
    """What a message is read after: the previous turn's Decision (``previous``), or, when the caller keeps
    no decisions, its message (``context``); neither for a message that opens a conversation."""

    previous: Decision | None = None
    context: str | None = None

    @property
    def given(self) -> bool:
        """Whether there is a previous turn to read the message with."""
        return self.previous is not None or bool(self.context)


@dataclass(frozen=True)
class Context:
    """What a continuation is read with: the conversation's intents, primary first, and where they came
    from (``previous_decision``, or ``previous_message`` when only its text was given and was routed)."""

    intents: tuple[str, ...]
    source: str
    message_chars: int | None = None

    @property
    def secondary(self) -> str | None:
        """The conversation's second intent, when it continues a two-intent request."""
        return self.intents[1] if len(self.intents) > 1 else None

    def detail(self) -> dict:
        out: dict = {"intents": list(self.intents), "from": self.source}
        if self.message_chars is not None:
            out["message_chars"] = self.message_chars
        return out


@dataclass(frozen=True)
class Reading:
    """A message that is not a continuation by itself, as read with the turn before it."""

    context: Context | None = None  # the conversation, when it was looked up
    follow_up: bool = False  # it leans to the conversation's intent
    out_of_scope: bool = False
    continuation: float | None = None  # read in context, a continuation: its probability mass


def read_turn(
    turn: Mapping[str, float],
    signals: Sequence[str],
    context_of: Callable[[], Context | None],
    threshold: float,
) -> Reading:
    """A message not sure of its own intent, read after a turn by the turn reader (router.turn_reader):
    social, out of scope whatever came before; a continuation, the conversation's intents (below the
    threshold, a follow-up: the verifier's intents with the context, else the conversation's); a request
    of its own, its own reading (out of scope on an out-of-scope signal, else the verifier or fallback)."""
    kind, p = kind_of(dict(turn))
    if kind == "social":
        return Reading(out_of_scope=True)
    ctx = context_of()
    if kind == "continuation" and ctx is not None:
        return Reading(ctx, continuation=p) if p >= threshold else Reading(ctx, follow_up=True)
    return Reading(ctx, out_of_scope=bool(signals))


def after_previous(turn: Turn, signals: Sequence[str]) -> Reading:
    """For a model without the continuation label: a message out of scope or unsure right after a turn
    that had an intent may continue it (a follow-up: the verifier, else the previous turn's intents)."""
    previous = turn.previous
    follow_up = previous is not None and previous.intent is not None
    return Reading(follow_up=follow_up, out_of_scope=bool(signals) and not follow_up)


def knows_continuations(labels: Sequence[str]) -> bool:
    """Whether a model can tell a continuation from small talk: it was trained with the label."""
    return CONTINUATION in labels


def is_continuation(c, threshold: float, has_turn: bool) -> bool:
    """A continuation to read in context (or, with no turn before it, to answer ``needs_context``): the
    continuation class at or above the threshold; with no previous turn also below it, when it leads and
    the message surely asks for nothing of its own (continuation and out of scope together reach the
    threshold: a bare "yes" is not a request for the fallback's skills)."""
    if c.label != CONTINUATION:
        return False
    if c.confidence >= threshold:
        return True
    return not has_turn and c.confidence + dict(c.ranking).get(OUT_OF_SCOPE, 0.0) >= threshold


# After a request, a message that asks for no intent of its own is taken to be as likely to continue it as
# to be small talk, while a model learns those odds from its training rows (the shipped corpus has about
# two OUT_OF_SCOPE rows to each CONTINUATION row). With a previous turn, the two classes' shares of their
# joint probability are re-weighted by the ratio of their training rows (``context_weight``): a change of
# prior between them that leaves every intent's probability as it is. A model whose manifest does not
# count its rows gets DEFAULT_CONTEXT_WEIGHT.
DEFAULT_CONTEXT_WEIGHT = 2.0


def context_weight(label_counts: Mapping[str, int] | None) -> float:
    """OUT_OF_SCOPE rows per CONTINUATION row in the training data (at least 1), from the manifest."""
    counts = label_counts or {}
    oos, cont = counts.get(OUT_OF_SCOPE, 0), counts.get(CONTINUATION, 0)
    return max(1.0, oos / cont) if oos and cont else DEFAULT_CONTEXT_WEIGHT


def with_prior(c, weight: float):
    """The Classification ``c`` as read after a previous turn: the probability that it is a continuation
    or small talk, split between the two with the continuation's odds times ``weight``; label and
    confidence those of the new top label."""
    probs = dict(c.ranking)
    p_cont, p_oos = probs.get(CONTINUATION, 0.0), probs.get(OUT_OF_SCOPE, 0.0)
    if not p_cont or weight == 1.0:
        return c
    joint, odds = p_cont + p_oos, weight * p_cont
    probs[CONTINUATION] = joint * odds / (odds + p_oos)
    if OUT_OF_SCOPE in probs:
        probs[OUT_OF_SCOPE] = joint * p_oos / (odds + p_oos)
    ranking = sorted(probs.items(), key=lambda kv: -kv[1])
    return replace(c, label=ranking[0][0], confidence=ranking[0][1], ranking=ranking)


def in_context(ranking: Sequence[tuple[str, float]], primary: str) -> tuple[str | None, float]:
    """The most probable outcome of a message read after a turn whose conversation's primary intent is
    ``primary``: a continuation lands on ``primary``, so its probability adds to that intent's; out of
    scope is None. Returns (outcome, its probability)."""
    probs = dict(ranking)
    mass: dict[str | None, float] = {}
    for label, p in probs.items():
        key = None if label == OUT_OF_SCOPE else primary if label == CONTINUATION else label
        mass[key] = mass.get(key, 0.0) + p
    best = max(mass, key=lambda k: mass[k])
    return best, mass[best]


def carried_intents(previous) -> list[str]:
    """The conversation's intents after the previous turn (a Decision), or [] without one."""
    if previous is None:
        return []
    intents = previous.conversation_intents or previous.intents
    return [str(i) for i in intents]


def conversation_after(
    intents: Sequence[str], previous, ranking: Sequence[dict], fallback: bool
) -> list[str]:
    """A new Decision's ``conversation_intents``: its own intents; for a turn without any, the previous
    turn's; and for an unsure request that opens a conversation (the fallback, nothing carried), its most
    probable intent, which is what a continuation of it most likely continues."""
    if intents:
        return list(intents)
    carried = carried_intents(previous)
    if carried or not fallback or not ranking:
        return carried
    return [ranking[0]["intent"]]


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
