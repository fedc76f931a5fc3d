"""Opening any model for evaluation with the backend that runs it: an exported directory through ONNX
Runtime (eval.metrics.predictors), a SetFit checkpoint through PyTorch (training.fit.intent_model.IntentModel).
"""

from __future__ import annotations

from pathlib import Path

from router.manifest import MANIFEST_NAME, ModelError, load_manifest
from training.fit.checkpoints import checkpoint_of, is_setfit_checkpoint
from training.fit.intent_model import IntentModel

BACKENDS = ("auto", "onnx", "torch")


def load_predictor(model: str | Path, backend: str = "auto", variant: str | None = None):
    """Open ``model`` for evaluation. ``auto``: a directory whose manifest has an ``export`` section runs
    through ONNX Runtime; one with a manifest but no export, or a bare SetFit checkpoint, through
    PyTorch. ``torch`` uses ``<model>/checkpoint`` (or the bare checkpoint given) with the manifest's
    temperature (a bare ``<model>/checkpoint`` uses its parent model's)."""
    from eval.metrics.predictors import OnnxPredictor

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    path = Path(model)
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    manifest = load_manifest(path) if (path / MANIFEST_NAME).is_file() else None
    if backend == "auto":
        if manifest is not None and manifest.export is not None:
            backend = "onnx"
        elif manifest is not None or is_setfit_checkpoint(path):
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
        ckpt = checkpoint_of(path, manifest)
        if not is_setfit_checkpoint(ckpt):
            raise ModelError(
                f"{ckpt}: no SetFit checkpoint (exported model directories ship without one; "
                "evaluate the training output, or use the onnx backend)"
            )
        return IntentModel.load(ckpt, manifest=manifest)
    if not is_setfit_checkpoint(path):
        raise ModelError(f"{path}: not a SetFit checkpoint (no config_setfit.json or model_head.pkl)")
    parent_manifest = None
    if (path.parent / MANIFEST_NAME).is_file():  # <model>/checkpoint given directly: its model's temperature
        m = load_manifest(path.parent)
        if checkpoint_of(path.parent, m).name == path.name:
            parent_manifest = m
    return IntentModel.load(path, manifest=parent_manifest)
