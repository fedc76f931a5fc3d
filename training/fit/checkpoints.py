"""Where SetFit checkpoints are: a model directory's ``checkpoint/`` (or the one its manifest names), a
teacher's checkpoint, or, for an exported teacher that ships without one, its body recovered from the
graph; and copying a checkpoint's body into a model being trained.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from router.manifest import MANIFEST_NAME, Manifest, ModelError, load_manifest

CHECKPOINT_DIR = "checkpoint"
Reporter = Callable[[str], None]


def is_setfit_checkpoint(path: Path) -> bool:
    return path.is_dir() and ((path / "config_setfit.json").is_file() or (path / "model_head.pkl").is_file())


def checkpoint_of(model_dir: Path, manifest: Manifest) -> Path:
    return model_dir / str(manifest.training.get("checkpoint", CHECKPOINT_DIR))


def teacher_body(path: str | Path, workdir: Path, report: Reporter = print) -> tuple[Path, dict | None]:
    """The teacher's body as a folder ``load_body`` reads: its SetFit checkpoint (then None), or, for an
    exported model that ships without one, the body recovered from its graph into ``workdir``, with
    training.export.recover's note on it."""
    try:
        return teacher_checkpoint(path), None
    except ModelError:
        if not (Path(path) / MANIFEST_NAME).is_file():
            raise
    import torch

    from training.export.recover import recover_body

    out = workdir / "recovered-body"
    with torch.random.fork_rng(devices=[]):  # the student's training draws what it would from a checkpoint
        note = recover_body(path, out, report=report)
    return out, note


def teacher_checkpoint(path: str | Path) -> Path:
    """The SetFit checkpoint of a teacher given as a build directory (``<dir>/checkpoint``) or as the
    checkpoint itself."""
    path = Path(path)
    named = checkpoint_of(path, load_manifest(path)) if (path / MANIFEST_NAME).is_file() else None
    for candidate in (named, path / CHECKPOINT_DIR, path):
        if candidate is not None and is_setfit_checkpoint(candidate):
            return candidate
    raise ModelError(
        f"teacher {path}: no SetFit checkpoint there or in {path / CHECKPOINT_DIR}, and no exported model "
        f"({MANIFEST_NAME}) whose graph could give the body: name a build directory or an exported model"
    )


def load_body(body, checkpoint: Path) -> None:
    """Copy a fine-tuned body's weights into ``body``; the two must share the base model's architecture."""
    from sentence_transformers import SentenceTransformer

    source = SentenceTransformer(str(checkpoint), device="cpu")
    try:
        body.load_state_dict(source.state_dict())
    except RuntimeError as e:
        raise ModelError(f"teacher {checkpoint} does not fit base_model's architecture: {e}") from e


def teacher_description(path: str | Path, recovery: dict | None = None) -> dict:
    """Which model a student was distilled from: its path and, for a build directory, its model id and the
    sha256 of its default graph (which a deterministic rebuild of the teacher reproduces, while its model id
    changes); for an exported model without its checkpoint, the graph its body was recovered from
    (training.export.recover)."""
    out = {"path": str(path)}
    if (Path(path) / MANIFEST_NAME).is_file():
        teacher = load_manifest(path)
        out["model_id"] = teacher.model_id
        if teacher.export is not None:
            out["graph_sha256"] = teacher.export.variants[teacher.export.default_variant].file.sha256
    if recovery is not None:
        out["body"] = {k: v for k, v in recovery.items() if k != "model_id"}
    return out
