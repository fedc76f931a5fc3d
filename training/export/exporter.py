"""Export a trained SetFit model to one ONNX graph: token ids -> calibrated probabilities.

The fp32 graph comes first (training.export.torch_graph). The int8 variant tries the options' recipes
fastest first and keeps the first that passes the parity check (training.export.int8_search): each
variant against the PyTorch model on held-out text, one message at a time and in batches. When every
int8 recipe fails, a faithful graph (fp16 storage, else fp32) becomes the default variant.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from router.manifest import Manifest, ModelError, file_entry, load_manifest
from training.export.example_embeddings import add_embeddings
from training.export.export_run import (
    CLAUSE_READER_FILE,
    PLAIN_FP32,
    TOKENIZER_FILE,
    VARIANT_FILES,
    ExportRun,
    train_file,
)
from training.export.half_storage import HALF_DESCRIPTION, store_half
from training.export.int8_search import best_int8
from training.export.options import ExportOptions
from training.export.parity import ParityError, ParityText, load_parity_text, reference
from training.export.torch_graph import known_export_noise_silenced, write_fp32
from training.fit.checkpoints import checkpoint_of
from training.fit.intent_model import IntentModel
from training.fit.turn_reading import put_back, set_aside


@known_export_noise_silenced()
def export_model(
    model_dir: str | Path,
    options: ExportOptions | None = None,
    *,
    parity_texts: Sequence[str] | None = None,
    parity_file: str | Path | Sequence[str | Path] | None = None,
    calibration_texts: Sequence[str] | None = None,
    report: Callable[[str], None] = print,
) -> Manifest:
    """Export ``model_dir/checkpoint`` next to its manifest as ``options`` say, and check parity on
    ``parity_texts`` (or the JSONL file(s) ``parity_file``: held-out, in-scope and out-of-scope text);
    returns the new manifest.

    The int8 graph is the first recipe that passes parity; the manifest names it and why the faster ones
    were rejected. The -keepK recipes rank the encoder nodes on ``calibration_texts`` (default: texts of
    the training file the manifest names, else of the parity text) and keep the K most sensitive out of
    int8; the manifest lists them.

    When every int8 recipe fails parity and the fp32 graph passes, a faithful graph becomes the default
    variant, so that a build whose int8 graphs miss by a message still ends with a model: the ``fp16`` graph
    (training.export.half_storage) when it passes its own parity check, else the fp32 graph. The failed
    int8 graph stays beside it, marked failed, for inspection. Raises ParityError when fp32 fails, or when
    int8 fails and ``options.require_int8``.
    """
    options = options or ExportOptions()
    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    turn_reader = set_aside(
        model_dir, manifest
    )  # it read the old graph's outputs (training.fit.turn_reading)
    model = _load_checked(model_dir, manifest)
    _write_model_files(model, manifest, model_dir, report)
    run = ExportRun(
        model_dir,
        manifest,
        model,
        options,
        _parity_text(manifest, parity_texts, parity_file),
        file_entry(model_dir, TOKENIZER_FILE),
        report,
    )
    run.ref = reference(model, run.parity.texts)
    manifest.export = None
    if "fp32" in options.variants:
        run.register("fp32")
        run.failures += run.check("fp32")
    if "int8" in options.variants:
        run.failures += best_int8(run, calibration_texts)
    _faithful_default(run)
    _finish(run, turn_reader)
    return manifest


def _load_checked(model_dir: Path, manifest: Manifest) -> IntentModel:
    """The checkpoint, loaded with eager attention, after checking that it and the manifest agree."""
    if manifest.calibration is None:
        raise ModelError(
            f"{model_dir}: the manifest has no calibration; train with 'intent-router train' first"
        )
    ckpt = checkpoint_of(model_dir, manifest)
    if not ckpt.is_dir():
        raise ModelError(f"{ckpt} not found: export needs the SetFit checkpoint written by training")
    model = IntentModel.load(ckpt, manifest=manifest)  # refuses a head order unlike the manifest's
    transformer = model.setfit.model_body[0].auto_model
    if hasattr(transformer, "set_attn_implementation"):  # eager attention: the pattern ORT fuses
        transformer.set_attn_implementation("eager")
    if (model.scope is None) != (manifest.in_scope is None):
        raise ModelError(
            f"{model_dir}: the checkpoint's in-scope distance and the manifest's in_scope disagree"
        )
    if (model.compound is None) != (manifest.compound is None):
        raise ModelError(f"{model_dir}: the checkpoint's compound head and the manifest's compound disagree")
    reader = manifest.compound.reader if manifest.compound else None
    if (reader.layers if reader else None) != (model.compound.reader_layers if model.compound else None):
        raise ModelError(f"{model_dir}: the checkpoint's clause reader and the manifest's disagree")
    return model


def _write_model_files(model: IntentModel, manifest: Manifest, model_dir: Path, report) -> None:
    """The clause reader's weights, the tokenizer and the fp32 graph (plain and fused)."""
    reader = manifest.compound.reader if manifest.compound else None
    if reader is not None:
        np.savez(
            model_dir / CLAUSE_READER_FILE,
            coef=model.compound.reader_coef.astype(np.float32),
            intercept=model.compound.reader_intercept.astype(np.float32),
        )
        reader.file = file_entry(model_dir, CLAUSE_READER_FILE)
    model.setfit.model_body.tokenizer.backend_tokenizer.save(str(model_dir / TOKENIZER_FILE))
    fp32 = model_dir / VARIANT_FILES["fp32"]
    manifest.normalize = write_fp32(model, manifest, model_dir / PLAIN_FP32, fp32, report)
    manifest.pooling = "mean"


def _parity_text(manifest: Manifest, texts: Sequence[str] | None, files) -> ParityText:
    if texts is not None:
        return ParityText(texts=list(texts))
    source = files or manifest.training.get("parity_file")
    if source is None:
        raise ValueError("parity needs held-out texts: pass parity_texts or parity_file (the test split)")
    return load_parity_text([source] if isinstance(source, str | Path) else list(source), manifest.labels)


def _faithful_default(run: ExportRun) -> None:
    """When int8 failed (and is not required): the fp16 graph, else the fp32 one, becomes the default."""
    variants, failures = run.options.variants, run.failures
    int8_failed = [f for f in failures if f.startswith("int8")]
    fp32_passed = "fp32" in variants and not any(f.startswith("fp32") for f in failures)
    fallback = bool(int8_failed) and not run.options.require_int8
    fp16_failed: list[str] = []
    if "fp16" in variants or (fallback and fp32_passed):
        half = store_half(run.path("fp32"), run.path("fp16"))
        saved = half["bytes_saved"] / 1e6
        run.report(f"fp16 graph: {half['tensors']} weights stored in half precision ({saved:.1f} MB less)")
        run.register("fp16", None, HALF_DESCRIPTION)
        fp16_failed = run.check("fp16")
        if "fp16" in variants:  # asked for: its failure is the export's
            failures += fp16_failed
    fp16_passed = "fp16" in run.manifest.export.variants and not fp16_failed
    faithful = ("fp16" if fp16_passed else "fp32" if fp32_passed else None) if fallback else None
    if faithful is not None:
        run.manifest.export.default_variant = faithful
        run.failures = [f for f in failures if f not in int8_failed]
        run.report(
            f"WARNING: no int8 recipe passed parity; the {faithful} graph is the default variant (fp32 "
            "compute, slower). The failed graphs stay, marked failed: " + "; ".join(int8_failed + fp16_failed)
        )


def _finish(run: ExportRun, turn_reader) -> None:
    """The embeddings and the turn reader of a passed export, the fp32 graph kept or removed, the manifest
    saved; ParityError when a gate failed."""
    manifest, model_dir = run.manifest, run.model_dir
    if not run.failures:  # a failed export keeps its graphs as they were checked
        add_embeddings(model_dir, manifest, train_file(manifest), run.report)
        put_back(model_dir, manifest, turn_reader, run.report)
    manifest.save(model_dir)
    (model_dir / PLAIN_FP32).unlink(missing_ok=True)
    if "fp32" not in run.options.variants:
        run.path("fp32").unlink(missing_ok=True)
    elif not run.options.keep_fp32 and manifest.export.default_variant != "fp32":
        run.path("fp32").unlink()
        del manifest.export.variants["fp32"]
        manifest.save(model_dir)
    if run.failures:
        raise ParityError("; ".join(run.failures))
