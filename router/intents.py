"""The five intents of the labeling contract (shared/INTENTS.md), and the out-of-scope label.

``OUT_OF_SCOPE`` is not a sixth intent: it marks messages that need no skill (greetings, thanks, small
talk, questions about the assistant). The model learns it as a class so that its probability is
calibrated like the rest; the router turns it into the absence of an intent (data/README.md).
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
LABELS: tuple[str, ...] = (*INTENTS, OUT_OF_SCOPE)  # what a corpus row or a model output may carry
