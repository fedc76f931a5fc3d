"""The five intents of the labeling contract (shared/INTENTS.md)."""

from __future__ import annotations

from enum import Enum


class Intent(str, Enum):
    SEARCH = "SEARCH"
    REASONING = "REASONING"
    PLANNING = "PLANNING"
    MEMORY = "MEMORY"
    ACTION = "ACTION"


INTENTS: tuple[str, ...] = tuple(i.value for i in Intent)
