"""What evaluation runs: any object with ``labels`` and ``predict_proba`` (the Predictor protocol).

``OnnxPredictor`` wraps an exported model directory (``router.classifier.Classifier``). The PyTorch
SetFit model (``training.fit.intent_model.IntentModel``) satisfies the same protocol; eval imports nothing from
training, so the torch backend is opened on the training side (``training.measure.backends.load_predictor``).
Optional attributes read by reports: ``backend``, ``variant``, ``model_id``, ``manifest``, ``temperature``;
a predictor with an in-scope distance also has ``distance_threshold`` and
``predict_with_distance(texts) -> (probabilities, distances)``; one with a compound head has
``compound_intents``, ``compound_spec`` (the manifest's compound section) and
``predict_compound(texts) -> (probabilities, distances, intent scores, intents per message, clauses per
message)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from router.classifier import Classification, Classifier
from router.manifest import MANIFEST_NAME, Manifest, ModelError, load_manifest


@runtime_checkable
class Predictor(Protocol):
    labels: list[str]

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (n, len(labels)), columns in ``labels`` order."""
        ...


def classification_from_probs(labels: Sequence[str], row: np.ndarray) -> Classification:
    order = np.argsort(-np.asarray(row))
    ranking = [(labels[j], float(row[j])) for j in order]
    return Classification(label=ranking[0][0], confidence=ranking[0][1], ranking=ranking)


class OnnxPredictor:
    backend = "onnx"

    def __init__(
        self, model_dir: str | Path, variant: str | None = None, manifest: Manifest | None = None
    ) -> None:
        self.classifier = Classifier(model_dir, variant=variant, manifest=manifest)
        self.labels = list(self.classifier.labels)
        self.variant = self.classifier.variant
        self.model_id = self.classifier.model_id
        self.manifest = self.classifier.manifest
        self.temperature = self.manifest.calibration.temperature if self.manifest.calibration else None
        self.distance_threshold = self.classifier.distance_threshold
        self.compound_intents = list(self.classifier.compound_intents)
        self.compound_spec = self.manifest.compound

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.classifier.predict_proba(list(texts)), dtype=np.float64)

    def predict_with_distance(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        probs, dist = self.classifier.predict(list(texts))
        return np.asarray(probs, dtype=np.float64), (None if dist is None else np.asarray(dist, np.float64))

    def predict_compound(
        self, texts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[list[str]], list[list[dict]]]:
        probs, dist, scores, intents, clauses = self.classifier.predict_compound(list(texts))
        d = None if dist is None else np.asarray(dist, np.float64)
        return np.asarray(probs, dtype=np.float64), d, np.asarray(scores, dtype=np.float64), intents, clauses


def load_onnx_predictor(model: str | Path, variant: str | None = None) -> OnnxPredictor:
    """Open an exported model directory for evaluation."""
    path = Path(model)
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    if not (path / MANIFEST_NAME).is_file():
        raise ModelError(f"{path}: the ONNX backend needs a model directory with {MANIFEST_NAME}")
    return OnnxPredictor(path, variant=variant, manifest=load_manifest(path))
