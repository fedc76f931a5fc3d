"""What a classifier says about one message (``Classification``), and what a Router needs from a
classifier (``RoutingClassifier``): router.classifier.Classifier is the ONNX one; anything with the same
members routes, so the routing rules can be tested with a classifier that returns fixed answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np


@dataclass(frozen=True)
class Classification:
    label: str
    confidence: float
    ranking: list[tuple[str, float]]
    tokenize_ms: float = 0.0
    inference_ms: float = 0.0
    truncated: bool = False
    num_tokens: int = 0
    distance: float | None = None  # in-scope distance (manifest.in_scope), when the graph computes it
    intent_scores: dict[str, float] | None = None  # one-vs-rest scores (manifest.compound), when computed
    intents: list[str] = field(default_factory=list)  # router.compound.resolve_intents: primary first
    clauses: list[dict] = field(default_factory=list)  # the clauses classified for it, when it has any
    embedding: np.ndarray | None = None  # the sentence embedding, when the classifier fetches it
    turn: dict[str, float] | None = None  # after a turn: continuation / social / own (router.turn_reader)


class RoutingClassifier(Protocol):
    """The classifier a Router routes with. The Router reads ``distance_threshold`` at every message, so a
    caller may change it on a built Router's classifier. A router config that defines intents by
    examples (router.examples) also needs the classifier's sentence embeddings and reference sample,
    which router.classifier.Classifier has."""

    @property
    def labels(self) -> Sequence[str]:
        """Every label the model predicts, intents and reserved ones (router.intents), in its order."""
        ...

    @property
    def model_id(self) -> str:
        """What the Decision names as its ``model_id``."""
        ...

    @property
    def label_counts(self) -> Mapping[str, int] | None:
        """Training rows per label (the manifest's), for the prior after a turn
        (router.conversation.context_weight); None when the model does not record them."""
        ...

    @property
    def distance_threshold(self) -> float | None:
        """The in-scope distance above which a message is out of scope; None without one."""
        ...

    def classify_batch(self, texts: Sequence[str]) -> list[Classification]:
        """One Classification per text, in order; raises on a text it cannot take."""
        ...
