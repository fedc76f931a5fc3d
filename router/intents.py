"""Labels: a model's intents are data, read from its training corpus and recorded in its manifest and graph.

Two labels are reserved and optional in a corpus. ``OUT_OF_SCOPE`` is not an intent: it marks messages
that need no skill (greetings, thanks, small talk, questions about the assistant). ``CONTINUATION`` is not
one either: it marks a message that only makes sense after the turn before it ("yes, do it", "only the EU
ones", "the second one", "try again"), which takes the intent of the request it continues
(router.conversation). A model learns both as classes so that their probabilities are calibrated like the
rest (data/README.md). Every other label of a model is one of its intents; the shipped model's five follow
the labeling contract (data/INTENTS.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

OUT_OF_SCOPE = "OUT_OF_SCOPE"
CONTINUATION = "CONTINUATION"
RESERVED: tuple[str, ...] = (OUT_OF_SCOPE, CONTINUATION)  # labels that are not intents
# A label names a class, a config entry and a JSON enum value; "+" joins the two intents of a pair.
LABEL_PATTERN = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]{0,63}")


def is_right(label: str, intent: str | None) -> bool:
    """Whether a routed intent answers a label: the label itself, or, for a reserved label (out of scope,
    a continuation alone), no intent."""
    return intent is None if label in RESERVED else intent == label


def intents_of(labels: Iterable[str]) -> tuple[str, ...]:
    """The intents among ``labels`` (the reserved labels left out), in their order."""
    return tuple(label for label in labels if label not in RESERVED)


def answers_of(labels: Iterable[str]) -> tuple[str, ...]:
    """What a verifier may answer for one message of a model with ``labels``: one of its intents, or out
    of scope (never a continuation: the verifier reads the previous turn itself)."""
    return (*intents_of(labels), OUT_OF_SCOPE)


def label_problem(label: object) -> str | None:
    """Why ``label`` cannot name a class, or None: a letter, then letters, digits, '_', '.' or '-' (at most
    64 characters)."""
    if not isinstance(label, str):
        return f"a label is a string, got {type(label).__name__}"
    if not LABEL_PATTERN.fullmatch(label):
        return (
            f"label {label[:70]!r} is not a name: a letter, then letters, digits, '_', '.' or '-' "
            "(at most 64 characters)"
        )
    return None


def check_labels(labels: Sequence[str], source: str = "the corpus") -> tuple[str, ...]:
    """``labels`` when they can make a model: valid names, at least two, at least one of them an intent."""
    for label in labels:
        problem = label_problem(label)
        if problem:
            raise ValueError(f"{source}: {problem}")
    if len(set(labels)) < 2:
        raise ValueError(f"{source}: need at least two labels to train, found {sorted(set(labels))}")
    if not intents_of(labels):
        raise ValueError(
            f"{source}: every label is reserved ({', '.join(RESERVED)}); name at least one intent"
        )
    return tuple(labels)


def intent_pair(intent: str | None, secondary: str | None) -> tuple[str, ...]:
    """``intent`` and, for a compound request, a different ``secondary``; () without an intent."""
    if intent is None:
        return ()
    return (intent,) if secondary in (None, intent) else (intent, secondary)
