"""The five intents of the labeling contract (data/INTENTS.md), and the two reserved labels.

``OUT_OF_SCOPE`` is not a sixth intent: it marks messages that need no skill (greetings, thanks, small
talk, questions about the assistant). ``CONTINUATION`` is not one either: it marks a message that only
makes sense after the turn before it ("yes, do it", "only the EU ones", "the second one", "try again"),
which takes the intent of the request it continues (router.conversation). The model learns both as
classes so that their probabilities are calibrated like the rest (data/README.md).
"""

from __future__ import annotations

from enum import Enum


class Intent(str, Enum):
    SEARCH = "SEARCH"
    REASONING = "REASONING"
    PLANNING = "PLANNING"
    MEMORY = "MEMORY"
    ACTION = "ACTION"


INTENTS: tuple[str, ...] = tuple(i.value for i in Intent)
OUT_OF_SCOPE = "OUT_OF_SCOPE"
CONTINUATION = "CONTINUATION"
RESERVED: tuple[str, ...] = (OUT_OF_SCOPE, CONTINUATION)  # labels that are not intents
LABELS: tuple[str, ...] = (*INTENTS, *RESERVED)  # what a corpus row or a model output may carry
ANSWERS: tuple[str, ...] = (*INTENTS, OUT_OF_SCOPE)  # what a verifier may answer for one message
