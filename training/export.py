"""Export a trained SetFit model to one ONNX graph: token ids -> calibrated probabilities.

The graph is transformer -> mean pooling -> L2 normalisation -> logistic head -> / T -> softmax, with
dynamic batch and sequence axes, exported with eager attention so that onnxruntime's optimizer fuses it
(training.quantize). The int8 variant tries the recipes of training.quantize fastest first and keeps the
first that passes the parity check: each variant against the PyTorch model on held-out text, one message
at a time and in batches.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from router.manifest import Export, Manifest, ModelError, Variant, file_entry, load_manifest
from router.model_card import graph_scope_metadata, stamp_graph
from training.checkpoints import checkpoint_of
from training.embeddings import add_embeddings
from training.half_storage import HALF_DESCRIPTION, HALF_INT8, store_half
from training.head import softmax_weights
from training.intent_model import IntentModel
from training.parity import (
    PARITY_BATCH,
    ParityError,
    ParityText,
    check_parity,
    load_parity_text,
    margin_shortfalls,
    reference,
)
from training.quantize import (
    DEFAULT_RECIPES,
    check_recipes,
    fuse_transformer,
    kept_count,
    known_export_noise_silenced,
    quantize,
    rank_sensitivity,
)
from training.turn_reader import put_back, set_aside

OPSET = 17
TOKENIZER_FILE = "tokenizer.json"
# fp16: the fp32 graph with its weights stored in half precision (training.half_storage), fp32 compute
VARIANT_FILES = {"fp32": "model.fp32.onnx", "fp16": "model.fp16.onnx", "int8": "model.int8.onnx"}
CLAUSE_READER_FILE = "clause_reader.npz"  # the in-context clause head (router.manifest.ClauseReader)
PLAIN_FP32 = "model.fp32.plain.onnx"  # unfused, the input of the nbits recipe; removed after export
CALIBRATION_TEXTS = 256  # training texts for the sensitivity pass of the -keepK recipes


def _graph_module(intent_model: IntentModel, temperature: float):
    """The graph as a torch module: probabilities, plus the in-scope distance, the one-vs-rest intent
    scores and the clause reader's token states when the model has them (in that order)."""
    import torch
    from torch import nn

    model, scope, compound = intent_model.setfit, intent_model.scope, intent_model.compound
    body = model.model_body
    transformer = body[0].auto_model
    pooling = body[1]
    mode = getattr(pooling, "pooling_mode", None) or (
        "mean" if getattr(pooling, "pooling_mode_mean_tokens", True) else None
    )
    if mode not in ("mean", "mean_tokens"):
        raise ModelError(f"export supports mean pooling only, the body uses {mode!r}")
    normalize = any(type(m).__name__ == "Normalize" for m in body)
    coef, intercept = softmax_weights(model.model_head)

    reader_layers = list(compound.reader_layers or []) if compound is not None else []

    class IntentGraph(nn.Module):
        def __init__(self):
            super().__init__()
            self.transformer = transformer
            self.register_buffer("weight", torch.from_numpy(coef))
            self.register_buffer("bias", torch.from_numpy(intercept))
            self.inv_temperature = float(1.0 / temperature)
            if scope is not None:  # Mahalanobis: ||x F - m F||^2, the smallest over in-scope classes
                self.register_buffer("factor", torch.from_numpy(scope.factor.astype(np.float32)))
                centres = (scope.means @ scope.factor).astype(np.float32)
                self.register_buffer("centres", torch.from_numpy(centres))
            if compound is not None:  # one logistic regression per intent: sigmoid(x W^T + b)
                self.register_buffer("ovr_weight", torch.from_numpy(compound.coef.astype(np.float32)))
                self.register_buffer("ovr_bias", torch.from_numpy(compound.intercept.astype(np.float32)))

        def forward(self, input_ids, attention_mask):
            run = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=bool(reader_layers)
            )
            hidden = run.last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if normalize:
                emb = torch.nn.functional.normalize(emb, p=2.0, dim=1)
            logits = emb @ self.weight.T + self.bias
            out = [torch.softmax(logits * self.inv_temperature, dim=-1)]
            if scope is not None:
                proj = emb @ self.factor
                diff = proj.unsqueeze(1) - self.centres.unsqueeze(0)
                out.append((diff**2).sum(dim=-1).min(dim=1).values)
            if compound is not None:
                out.append(torch.sigmoid(emb @ self.ovr_weight.T + self.ovr_bias))
            if reader_layers:  # the clauses' tokens are pooled by the router (router.compound.clause_vectors)
                out.append(torch.cat([run.hidden_states[k] for k in reader_layers], dim=-1))
            return out[0] if len(out) == 1 else tuple(out)

    return IntentGraph().eval(), normalize


@known_export_noise_silenced()
def export_model(
    model_dir: str | Path,
    parity_texts: Sequence[str] | None = None,
    parity_file: str | Path | Sequence[str | Path] | None = None,
    variants: Sequence[str] = ("fp32", "int8"),
    keep_fp32: bool = True,
    report: Callable[[str], None] = print,
    recipes: Sequence[str] = DEFAULT_RECIPES,
    calibration_texts: Sequence[str] | None = None,
    require_int8: bool = False,
    portable_int8: bool = False,
    kept_fp32: bool = False,
    half_int8: bool = False,
) -> Manifest:
    """Export ``model_dir/checkpoint`` next to its manifest and check parity on ``parity_texts`` (or the
    JSONL file(s) ``parity_file``: held-out, in-scope and out-of-scope text); returns the new manifest.

    The int8 graph is the first of ``recipes`` that passes parity; the manifest names it and why the
    faster ones were rejected. The -keepK recipes rank the encoder nodes on ``calibration_texts`` (default:
    CALIBRATION_TEXTS texts of the training file the manifest names, else of the parity text) and keep the
    K most sensitive out of int8; the manifest lists them.

    When every int8 recipe fails parity and the fp32 graph passes, a faithful graph becomes the default
    variant, so that a build whose int8 graphs miss by a message still ends with a model: the ``fp16`` graph
    (the fp32 graph with its weights stored in half precision, half the file, the fp32 graph's speed:
    training.half_storage) when it passes its own parity check, else the fp32 graph. The failed int8 graph
    stays beside it, marked failed, for inspection. ``variants`` may name ``fp16`` to make it in any case.
    Raises ParityError when fp32 fails, or when int8 fails and ``require_int8``. ``portable_int8``: the
    rowscaled recipes keep their weights to 7 bits, so CPUs without VNNI compute the same graph
    (training.quantize.PORTABLE_WEIGHT_BITS). ``kept_fp32``: the MatMuls a -keepK recipe keeps stay fp32
    instead of MatMulNBits (faster on CPUs without VNNI; training.quantize.KEPT_FP32). ``half_int8``: the
    weights an int8 graph keeps in fp32 (its embedding table) are stored as float16 before its parity check.
    """
    unknown = set(variants) - set(VARIANT_FILES)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANT_FILES)}")
    check_recipes(recipes)
    import torch

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    turn_reader = set_aside(model_dir, manifest)  # it read the old graph's outputs (training.turn_reader)
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
    temperature = manifest.calibration.temperature
    graph, normalize = _graph_module(model, temperature)
    if (model.scope is None) != (manifest.in_scope is None):
        raise ModelError(
            f"{model_dir}: the checkpoint's in-scope distance and the manifest's in_scope disagree"
        )
    if (model.compound is None) != (manifest.compound is None):
        raise ModelError(f"{model_dir}: the checkpoint's compound head and the manifest's compound disagree")
    reader = manifest.compound.reader if manifest.compound else None
    if (reader.layers if reader else None) != (model.compound.reader_layers if model.compound else None):
        raise ModelError(f"{model_dir}: the checkpoint's clause reader and the manifest's disagree")
    outputs = (
        ["probabilities"]
        + ([manifest.in_scope.output] if manifest.in_scope else [])
        + ([manifest.compound.output] if manifest.compound else [])
        + ([reader.output] if reader else [])
    )
    if reader is not None:
        np.savez(
            model_dir / CLAUSE_READER_FILE,
            coef=model.compound.reader_coef.astype(np.float32),
            intercept=model.compound.reader_intercept.astype(np.float32),
        )
        reader.file = file_entry(model_dir, CLAUSE_READER_FILE)

    tokenizer = model.setfit.model_body.tokenizer
    tokenizer.backend_tokenizer.save(str(model_dir / TOKENIZER_FILE))
    sample = tokenizer(["an example message", "two"], padding=True, return_tensors="pt")
    fp32_path, plain_path = model_dir / VARIANT_FILES["fp32"], model_dir / PLAIN_FP32
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(
            graph,
            (sample["input_ids"], sample["attention_mask"]),
            str(plain_path),
            input_names=["input_ids", "attention_mask"],
            output_names=outputs,
            dynamic_axes={
                "input_ids": {0: "batch", 1: "sequence"},
                "attention_mask": {0: "batch", 1: "sequence"},
                **{name: {0: "batch"} for name in outputs},
                **({reader.output: {0: "batch", 1: "sequence"}} if reader else {}),
            },
            opset_version=OPSET,
            dynamo=False,
        )
    cfg = transformer.config
    try:
        fused = fuse_transformer(plain_path, fp32_path, cfg.num_attention_heads, cfg.hidden_size)
    except Exception as e:  # an architecture the optimizer does not know: ship the unfused graph
        report(f"attention fusion failed ({type(e).__name__}: {e}); keeping the unfused graph")
        fused = {}
        fp32_path.write_bytes(plain_path.read_bytes())
    report(
        f"fp32 graph exported in {time.perf_counter() - t0:.1f}s ({fp32_path.stat().st_size / 1e6:.1f} MB; "
        f"fused {fused or 'nothing'})"
    )
    manifest.pooling = "mean"
    manifest.normalize = normalize
    tokenizer_entry = file_entry(model_dir, TOKENIZER_FILE)
    if parity_texts is None:
        source = parity_file or manifest.training.get("parity_file")
        if source is None:
            raise ValueError("parity needs held-out texts: pass parity_texts or parity_file (the test split)")
        files = [source] if isinstance(source, str | Path) else list(source)
        parity = load_parity_text(files, manifest.labels)
    else:
        parity = ParityText(texts=list(parity_texts))
    ref = reference(model, parity.texts)

    def stamp(v: str) -> None:  # the graph carries what it depends on, inside the bytes its sha256 covers
        stamp_graph(
            model_dir / VARIANT_FILES[v],
            labels=manifest.labels,
            max_seq_length=manifest.max_seq_length,
            temperature=manifest.calibration.temperature,
            extra=graph_scope_metadata(manifest),
        )

    def register(v: str, recipe: str | None = None, description: str | None = None) -> Variant:
        stamp(v)
        spec = Variant(file=file_entry(model_dir, VARIANT_FILES[v]), quantization=description, recipe=recipe)
        manifest.export = Export(
            opset=OPSET,
            tokenizer=tokenizer_entry,
            variants={**(manifest.export.variants if manifest.export else {}), v: spec},
            default_variant=next(d for d in ("int8", "fp16", "fp32", v) if d in variants or d == v),
        )
        manifest.save(model_dir)
        return spec

    manifest.export = None
    failures: list[str] = []
    for v in [v for v in variants if v == "fp32"]:
        register(v)
        failures += check_parity(model, model_dir, manifest, parity, report, [v], ref)
    if "int8" in variants:
        if not recipes:
            raise ValueError("the int8 variant needs at least one recipe")
        rejected: list[str] = []
        ranking: list[tuple[str, float]] = []
        calib = list(calibration_texts or _calibration_texts(manifest, parity.texts))
        fallback = None  # the first recipe that passes the gates but not with MARGIN

        def build(recipe: str) -> tuple[Variant, list[str]]:
            nonlocal ranking
            t0 = time.perf_counter()
            if kept_count(recipe) and not ranking:
                feeds = _feeds(tokenizer, calib, manifest.max_seq_length)
                ranking = rank_sensitivity(fp32_path, feeds, portable=portable_int8)
                report(
                    f"sensitivity of {len(ranking)} encoder nodes on {len(calib)} texts in "
                    f"{time.perf_counter() - t0:.0f}s; most sensitive: "
                    + ", ".join(f"{n} {s:.3f}" for n, s in ranking[:6])
                )
                t0 = time.perf_counter()
            keep = ranking[: kept_count(recipe)]
            dst = model_dir / VARIANT_FILES["int8"]
            kept = [n for n, _ in keep]
            description = quantize(
                recipe, fp32_path, plain_path, dst, keep=kept, portable=portable_int8, kept_fp32=kept_fp32
            )
            if half_int8:
                store_half(dst, dst)
                description += HALF_INT8
            report(
                f"int8 {recipe} quantized in {time.perf_counter() - t0:.1f}s ({dst.stat().st_size / 1e6:.1f} MB)"
            )
            spec = register("int8", recipe, description)
            spec.kept_nodes = dict(keep)
            spec.calibration_texts = len(calib) if keep else None
            return spec, check_parity(model, model_dir, manifest, parity, report, ["int8"], ref)

        for recipe in recipes:
            spec, failed = build(recipe)
            if not failed:
                short = margin_shortfalls(spec.parity)
                if not short:
                    break
                failed = [f"int8 ({recipe}) passes, without margin: {', '.join(short)}"]
                fallback = fallback or recipe
            rejected += failed
            report(f"int8 {recipe} rejected: {'; '.join(failed)}")
        else:
            if fallback is not None:
                report(f"int8: no recipe passes with margin; keeping {fallback}, the first that passes")
                if fallback != recipe:  # the graph on disk is a later recipe's: rebuild the fallback
                    spec, failed = build(fallback)
                else:
                    failed = []
                rejected = [r for r in rejected if not r.startswith(f"int8 ({fallback})")]
            failures += failed
        spec.rejected = [r for r in rejected if r not in failures]
    int8_failed = [f for f in failures if f.startswith("int8")]
    fp32_passed = "fp32" in variants and not any(f.startswith("fp32") for f in failures)
    fallback = bool(int8_failed) and not require_int8
    fp16_failed: list[str] = []
    if "fp16" in variants or (fallback and fp32_passed):
        half = store_half(fp32_path, model_dir / VARIANT_FILES["fp16"])
        saved = half["bytes_saved"] / 1e6
        report(f"fp16 graph: {half['tensors']} weights stored in half precision ({saved:.1f} MB less)")
        register("fp16", None, HALF_DESCRIPTION)
        fp16_failed = check_parity(model, model_dir, manifest, parity, report, ["fp16"], ref)
        if "fp16" in variants:  # asked for: its failure is the export's
            failures += fp16_failed
    fp16_passed = "fp16" in manifest.export.variants and not fp16_failed
    faithful = ("fp16" if fp16_passed else "fp32" if fp32_passed else None) if fallback else None
    if faithful is not None:
        manifest.export.default_variant = faithful
        failures = [f for f in failures if f not in int8_failed]
        report(
            f"WARNING: no int8 recipe passed parity; the {faithful} graph is the default variant (fp32 "
            "compute, slower). The failed graphs stay, marked failed: " + "; ".join(int8_failed + fp16_failed)
        )
    if not failures:  # a failed export keeps its graphs as they were checked
        add_embeddings(model_dir, manifest, _train_file(manifest), report)
        put_back(model_dir, manifest, turn_reader, report)
    manifest.save(model_dir)
    plain_path.unlink(missing_ok=True)
    if "fp32" not in variants:
        fp32_path.unlink(missing_ok=True)
    elif not keep_fp32 and manifest.export.default_variant != "fp32":
        fp32_path.unlink()
        del manifest.export.variants["fp32"]
        manifest.save(model_dir)
    if failures:
        raise ParityError("; ".join(failures))
    return manifest


def _train_file(manifest: Manifest) -> Path | None:
    """The training file the manifest names, if it is here."""
    files = (manifest.training.get("data") or {}).get("files") or {}
    return next((Path(f) for f in files if "train" in Path(f).stem and Path(f).is_file()), None)


def _calibration_texts(manifest: Manifest, fallback: Sequence[str]) -> list[str]:
    """CALIBRATION_TEXTS texts (seeded sample) of the training file the manifest names, if it is here."""
    import random

    from eval.data import load_unlabeled

    train = _train_file(manifest)
    texts = list(load_unlabeled(train).texts) if train is not None else list(fallback)
    random.Random(0).shuffle(texts)
    return texts[:CALIBRATION_TEXTS]


def _feeds(tokenizer, texts: Sequence[str], max_length: int | None) -> list[dict]:
    """Length-sorted batches of PARITY_BATCH as ONNX feeds."""
    order = sorted(texts, key=len)
    out = []
    for s in range(0, len(order), PARITY_BATCH):
        enc = tokenizer(
            order[s : s + PARITY_BATCH],
            padding=True,
            truncation=True,
            max_length=max_length,
            return_tensors="np",
        )
        out.append(
            {
                "input_ids": enc["input_ids"].astype(np.int64),
                "attention_mask": enc["attention_mask"].astype(np.int64),
            }
        )
    return out
