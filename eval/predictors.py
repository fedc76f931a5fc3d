"""What evaluation runs: an exported ONNX model or a PyTorch SetFit checkpoint, behind one interface.

Both give calibrated probabilities with columns in ``labels`` order, so their reports compare.

Backend choice (``backend="auto"``): a directory whose manifest has an ``export`` section is
evaluated through ONNX Runtime (``router.classifier.Classifier``); a directory with a manifest but no
export, or a bare SetFit checkpoint, through PyTorch (``training.train``). ``backend="torch"`` uses
``<model>/checkpoint`` (or the bare checkpoint given) with the manifest's temperature.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from router.classifier import Classification, Classifier
from router.manifest import MANIFEST_NAME, Manifest, ModelError, load_manifest

BACKENDS = ("auto", "onnx", "torch")
DEFAULT_CHECKPOINT = "checkpoint"


class Predictor(Protocol):
    backend: str
    labels: list[str]
    model_id: str
    variant: str | None
    manifest: Manifest | None

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        """Calibrated probabilities, shape (n, len(labels))."""
        ...

    def classify(self, text: str) -> Classification: ...


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

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        return np.asarray(self.classifier.predict_proba(list(texts)), dtype=np.float64)

    def classify(self, text: str) -> Classification:
        return self.classifier.classify(text)


class TorchPredictor:
    backend = "torch"
    variant = None

    def __init__(self, checkpoint: str | Path, manifest: Manifest | None = None) -> None:
        from training.train import head_labels, load_setfit

        self.checkpoint = Path(checkpoint)
        self.model = load_setfit(self.checkpoint)
        self.labels = head_labels(self.model)
        self.manifest = manifest
        if manifest is not None and list(manifest.labels) != self.labels:
            raise ModelError(
                f"{checkpoint}: head label order {self.labels} differs from the manifest's {manifest.labels}"
            )
        cal = manifest.calibration if manifest is not None else None
        # Without a manifest there is no fitted temperature: probabilities are the raw head's (T = 1).
        self.temperature = cal.temperature if cal is not None else 1.0
        self.calibrated = cal is not None
        self.model_id = (
            f"{manifest.model_id}/torch"
            if manifest is not None
            else f"{self.checkpoint.resolve().name}/torch"
        )

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        from training.train import calibrated_probs

        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)))
        return calibrated_probs(self.model, texts, self.temperature)

    def classify(self, text: str) -> Classification:
        return classification_from_probs(self.labels, self.predict_proba([text])[0])


def _is_setfit_checkpoint(path: Path) -> bool:
    return path.is_dir() and ((path / "config_setfit.json").is_file() or (path / "model_head.pkl").is_file())


def load_predictor(model: str | Path, backend: str = "auto", variant: str | None = None) -> Predictor:
    """Open ``model`` for evaluation; see the module docstring for how the backend is chosen."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    path = Path(model)
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    has_manifest = (path / MANIFEST_NAME).is_file()
    manifest = load_manifest(path) if has_manifest else None

    if backend == "auto":
        if manifest is not None and manifest.export is not None:
            backend = "onnx"
        elif manifest is not None or _is_setfit_checkpoint(path):
            backend = "torch"
        else:
            raise ModelError(
                f"{path}: neither a model directory (no {MANIFEST_NAME}) nor a SetFit checkpoint"
            )

    if backend == "onnx":
        if manifest is None:
            raise ModelError(f"{path}: the ONNX backend needs a model directory with {MANIFEST_NAME}")
        return OnnxPredictor(path, variant=variant, manifest=manifest)

    if variant is not None:
        raise ValueError("--variant names an ONNX graph; it does not apply to the torch backend")
    if manifest is not None:
        ckpt = path / str(manifest.training.get("checkpoint", DEFAULT_CHECKPOINT))
        if not _is_setfit_checkpoint(ckpt):
            raise ModelError(
                f"{ckpt}: no SetFit checkpoint (exported model directories ship without one; "
                "evaluate the training output, or use the onnx backend)"
            )
        return TorchPredictor(ckpt, manifest=manifest)
    if not _is_setfit_checkpoint(path):
        raise ModelError(f"{path}: not a SetFit checkpoint (no config_setfit.json or model_head.pkl)")
    parent = path.parent
    parent_manifest = None
    if (parent / MANIFEST_NAME).is_file():  # <model>/checkpoint given directly: use its model's temperature
        m = load_manifest(parent)
        if str(m.training.get("checkpoint", DEFAULT_CHECKPOINT)) == path.name:
            parent_manifest = m
    return TorchPredictor(path, manifest=parent_manifest)
