"""Intents defined by examples: served at once, with no retraining.

A router-config intent that the model does not predict, given a ``description`` and at least
MIN_EXAMPLES ``examples`` (utterances as users type them), is served by similarity: a message's sentence
embedding (a lower layer's pooled states, an output of the same graph run: training.export.example_embeddings) against
each example's, centred on the reference sample's mean, the nearest example counting. Its threshold is fitted when the Router is built, against the model's own
data: the reference sample its export keeps (training.export.example_embeddings), REFERENCE_QUANTILE of whose messages
stay below it. A config ``thresholds`` entry for the intent overrides it. ``coverage`` is the share of
the intent's examples that reach the threshold when each is left out of the others: how much of what the
examples describe it will catch.

A message whose nearest example of such an intent reaches its threshold takes that intent (source
``examples``); the classifier's own decision does not count. The next ``build`` with the config's
``router_config`` trains it as a class, from the same examples (training.fit.train).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from router.manifest import ModelError, verify_file

log = logging.getLogger(__name__)

MIN_EXAMPLES = 5
LOW_COVERAGE = 0.5  # below it the Router logs a warning when it is built
REFERENCE_QUANTILE = 0.99  # about 1 in 100 of the model's own messages would reach the threshold


@dataclass(frozen=True)
class ExampleIntent:
    name: str
    vectors: np.ndarray  # (examples, dim), rows L2-normalised
    threshold: float
    coverage: float  # share of the examples that reach the threshold, each left out of the others
    fitted: float  # the threshold fitted on the reference sample (``threshold`` unless overridden)

    def summary(self) -> dict:
        return {
            "examples": len(self.vectors),
            "threshold": round(self.threshold, 4),
            "fitted_threshold": round(self.fitted, 4),
            "coverage": round(self.coverage, 4),
        }


def _unit(rows: np.ndarray, centre: np.ndarray | float = 0.0) -> np.ndarray:
    """Rows centred on ``centre`` (the reference sample's mean: the states share a large common part) and
    scaled to unit length."""
    rows = np.asarray(rows, dtype=np.float32) - centre
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def reference_vectors(classifier) -> np.ndarray:
    """The model's reference sample (manifest export.reference): its raw embeddings."""
    entry = classifier.manifest.export.reference
    if entry is None or classifier.embedding_output is None:
        raise ModelError(
            f"{classifier.model_dir}: the model keeps no sentence-embedding output or reference sample, "
            "which intents defined by examples need; re-export it"
        )
    with np.load(verify_file(classifier.model_dir, entry)) as ref:
        return np.asarray(ref["vectors"], dtype=np.float32)


def fit_example_intent(
    name: str, vectors: np.ndarray, reference: np.ndarray, override: float | None = None
) -> ExampleIntent:
    """An example-defined intent's threshold, from its example vectors against the reference rows (raw
    embeddings, both)."""
    centre = reference.mean(axis=0)
    vectors = _unit(vectors, centre)
    nearest = (_unit(reference, centre) @ vectors.T).max(axis=1)  # each reference message's nearest example
    fitted = float(np.quantile(nearest, REFERENCE_QUANTILE))
    among = vectors @ vectors.T
    np.fill_diagonal(among, -np.inf)
    left_out = among.max(axis=1)  # each example against the others
    threshold = fitted if override is None else float(override)
    return ExampleIntent(name, vectors, threshold, float(np.mean(left_out >= threshold)), fitted)


class ExampleIntents:
    """The example-defined intents of one router config over one classifier."""

    def __init__(
        self,
        classifier,
        examples: Mapping[str, Sequence[str]],
        overrides: Mapping[str, float] | None = None,
    ) -> None:
        short = [n for n, texts in examples.items() if len(texts) < MIN_EXAMPLES]
        if short:
            raise ValueError(
                f"an intent defined by examples needs at least {MIN_EXAMPLES}: {', '.join(short)}"
            )
        reference = reference_vectors(classifier)
        self.centre = reference.mean(axis=0)  # what every embedding is centred on (fit_example_intent)
        overrides = overrides or {}
        self.intents = {
            name: fit_example_intent(name, classifier.embed(list(texts)), reference, overrides.get(name))
            for name, texts in examples.items()
        }
        classifier.with_embeddings = True  # every run now fetches the embedding too
        for intent in self.intents.values():
            if intent.coverage < LOW_COVERAGE:
                log.warning(
                    "intent %s: %.0f%% of its %d examples reach the threshold fitted against the model's own "
                    "data (%.3f); it will catch few messages: add examples, or train it as a class",
                    intent.name, 100 * intent.coverage, len(intent.vectors), intent.threshold,
                )  # fmt: skip

    def match(self, embedding: np.ndarray) -> dict | None:
        """The example-defined intent a message's embedding reaches, by the largest margin over its
        threshold, with its similarity; None when it reaches none."""
        emb = _unit(np.asarray(embedding, dtype=np.float32)[None, :], self.centre)[0]
        best = None
        for intent in self.intents.values():
            similarity = float((intent.vectors @ emb).max())
            margin = similarity - intent.threshold
            if margin >= 0 and (best is None or margin > best[0]):
                best = (margin, intent, similarity)
        if best is None:
            return None
        _, intent, similarity = best
        return {
            "intent": intent.name,
            "similarity": round(similarity, 6),
            "threshold": round(intent.threshold, 6),
        }

    def summary(self) -> dict:
        return {name: intent.summary() for name, intent in self.intents.items()}
