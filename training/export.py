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

from router.manifest import Export, Manifest, ModelError, Parity, Variant, file_entry, load_manifest
from router.model_card import graph_scope_metadata, stamp_graph
from training.model import IntentModel, checkpoint_of
from training.quantize import DEFAULT_RECIPES, fuse_transformer, quantize

OPSET = 17
TOKENIZER_FILE = "tokenizer.json"
VARIANT_FILES = {"fp32": "model.fp32.onnx", "int8": "model.int8.onnx"}
PLAIN_FP32 = "model.fp32.plain.onnx"  # unfused, the input of the nbits recipe; removed after export
PARITY_MIN = {"fp32": 1.0, "int8": 0.995}


# Fidelity gates of an int8 graph against PyTorch, one message at a time and in length-sorted batches:
# top-1 agreement and in-scope flag agreement (PARITY_MIN) and the largest probability difference.
MAX_PROB_DIFF = 0.15
PARITY_BATCH = 32


class ParityError(ModelError):
    """An exported graph disagrees with the PyTorch model more than allowed."""


def _graph_module(intent_model: IntentModel, temperature: float):
    """The graph as a torch module: probabilities, plus the in-scope distance when the model has one."""
    import torch
    from torch import nn

    model, scope = intent_model.setfit, intent_model.scope
    body = model.model_body
    transformer = body[0].auto_model
    pooling = body[1]
    mode = getattr(pooling, "pooling_mode", None) or (
        "mean" if getattr(pooling, "pooling_mode_mean_tokens", True) else None
    )
    if mode not in ("mean", "mean_tokens"):
        raise ModelError(f"export supports mean pooling only, the body uses {mode!r}")
    normalize = any(type(m).__name__ == "Normalize" for m in body)
    head = model.model_head
    coef = np.asarray(head.coef_, dtype=np.float32)
    intercept = np.asarray(head.intercept_, dtype=np.float32)
    if coef.shape[0] == 1:  # binary logistic regression -> two-column softmax
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.concatenate([np.zeros(1, dtype=np.float32), intercept])

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

        def forward(self, input_ids, attention_mask):
            hidden = self.transformer(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            emb = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
            if normalize:
                emb = torch.nn.functional.normalize(emb, p=2.0, dim=1)
            logits = emb @ self.weight.T + self.bias
            probs = torch.softmax(logits * self.inv_temperature, dim=-1)
            if scope is None:
                return probs
            proj = emb @ self.factor
            distance = ((proj.unsqueeze(1) - self.centres.unsqueeze(0)) ** 2).sum(dim=-1).min(dim=1).values
            return probs, distance

    return IntentGraph().eval(), normalize


def export_model(
    model_dir: str | Path,
    parity_texts: Sequence[str] | None = None,
    parity_file: str | Path | Sequence[str | Path] | None = None,
    variants: Sequence[str] = ("fp32", "int8"),
    keep_fp32: bool = True,
    report: Callable[[str], None] = print,
    recipes: Sequence[str] = DEFAULT_RECIPES,
) -> Manifest:
    """Export ``model_dir/checkpoint`` next to its manifest and check parity on ``parity_texts`` (or the
    JSONL file(s) ``parity_file``: held-out, in-scope and out-of-scope text); returns the new manifest.

    The int8 graph is the first of ``recipes`` that passes parity; the manifest names it and why the
    faster ones were rejected. Raises ParityError when a variant (or every int8 recipe) fails.
    """
    import torch

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    if manifest.calibration is None:
        raise ModelError(
            f"{model_dir}: the manifest has no calibration; train with 'intent-router train' first"
        )
    ckpt = checkpoint_of(model_dir, manifest)
    if not ckpt.is_dir():
        raise ModelError(f"{ckpt} not found: export needs the SetFit checkpoint written by training")
    unknown = set(variants) - set(VARIANT_FILES)
    if unknown:
        raise ValueError(f"unknown variants {sorted(unknown)}; choose from {sorted(VARIANT_FILES)}")

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
    outputs = ["probabilities"] + ([manifest.in_scope.output] if manifest.in_scope else [])

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
        from eval.data import load_unlabeled

        files = [source] if isinstance(source, str | Path) else list(source)
        parity_texts = [t for f in files for t in load_unlabeled(f).texts]
    parity_texts = list(parity_texts)
    reference = _reference(model, parity_texts)

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
            default_variant="int8" if "int8" in variants else variants[0],
        )
        manifest.save(model_dir)
        return spec

    manifest.export = None
    failures: list[str] = []
    for v in [v for v in variants if v == "fp32"]:
        register(v)
        failures += check_parity(model, model_dir, manifest, parity_texts, report, [v], reference)
    if "int8" in variants:
        if not recipes:
            raise ValueError("the int8 variant needs at least one recipe")
        rejected: list[str] = []
        for recipe in recipes:
            t0 = time.perf_counter()
            description = quantize(recipe, fp32_path, plain_path, model_dir / VARIANT_FILES["int8"])
            size = (model_dir / VARIANT_FILES["int8"]).stat().st_size / 1e6
            report(f"int8 {recipe} quantized in {time.perf_counter() - t0:.1f}s ({size:.1f} MB)")
            spec = register("int8", recipe, description)
            failed = check_parity(model, model_dir, manifest, parity_texts, report, ["int8"], reference)
            if not failed:
                break
            rejected += failed
            report(f"int8 {recipe} rejected: {'; '.join(failed)}")
        else:
            failures += failed
        spec.rejected = [r for r in rejected if r not in failures]
    manifest.save(model_dir)
    plain_path.unlink(missing_ok=True)
    if "fp32" not in variants:
        fp32_path.unlink(missing_ok=True)
    elif not keep_fp32:
        fp32_path.unlink()
        del manifest.export.variants["fp32"]
        manifest.save(model_dir)
    if failures:
        raise ParityError("; ".join(failures))
    return manifest


def _reference(model: IntentModel, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
    if not texts:
        raise ValueError("parity needs at least one text")
    return model.predict_with_distance(texts)


def check_parity(
    model: IntentModel,
    model_dir: Path,
    manifest: Manifest,
    texts: Sequence[str],
    report: Callable[[str], None] = print,
    variants: Sequence[str] | None = None,
    reference: tuple[np.ndarray, np.ndarray | None] | None = None,
) -> list[str]:
    """Compare exported variants with the PyTorch model, one message at a time and in length-sorted
    batches of PARITY_BATCH; record the result in the manifest and return the failures."""
    from router.classifier import Classifier

    texts = list(texts)
    torch_probs, torch_dist = reference if reference is not None else _reference(model, texts)
    limit = manifest.in_scope.threshold if manifest.in_scope is not None else None
    failures = []
    for name in variants or list(manifest.export.variants):
        variant = manifest.export.variants[name]
        need = PARITY_MIN[name]
        max_dp = MAX_PROB_DIFF if name != "fp32" else None
        runs = {}
        for batch in (1, PARITY_BATCH):
            clf = Classifier(
                model_dir, variant=name, manifest=manifest, require_parity=False, max_batch=batch
            )
            probs, dist = clf.predict(texts)
            agree = float((probs.argmax(1) == torch_probs.argmax(1)).mean())
            scope = diff = None
            if torch_dist is not None and dist is not None and limit is not None:
                scope = float(((dist > limit) == (torch_dist > limit)).mean())
                diff = float((np.abs(dist - torch_dist) / np.maximum(torch_dist, 1e-9)).max())
            runs[batch] = (agree, float(np.abs(probs - torch_probs).max()), scope, diff)
        problems = [
            f"{mode} {what} {value:.4f} (need {sign} {bound})"
            for mode, (agree, dp, scope, _) in (("single", runs[1]), ("batched", runs[PARITY_BATCH]))
            for what, value, sign, bound in (
                ("top-1 agreement", agree, ">=", need),
                ("in-scope flag agreement", scope, ">=", need),
                ("max |dp|", dp, "<=", max_dp),
            )
            if value is not None and bound is not None and (value < bound if sign == ">=" else value > bound)
        ]
        (agree, dp, scope, ddiff), (b_agree, b_dp, b_scope, _) = runs[1], runs[PARITY_BATCH]
        variant.parity = Parity(
            n=len(texts),
            top1_agreement=agree,
            max_abs_prob_diff=dp,
            in_scope_agreement=scope,
            max_rel_distance_diff=ddiff,
            min_required=need,
            passed=not problems,
            batched_top1_agreement=b_agree,
            batched_max_abs_prob_diff=b_dp,
            batched_in_scope_agreement=b_scope,
            max_abs_prob_diff_allowed=max_dp,
        )
        scope_note = "" if scope is None else f", in-scope flag agreement {scope:.4f}/{b_scope:.4f}"
        report(
            f"parity {name}: top-1 agreement {agree:.4f}/{b_agree:.4f} single/batched (need >= {need}), "
            f"max |dp| {dp:.2e}/{b_dp:.2e}{scope_note} on {len(texts)} texts"
        )
        if problems:
            failures.append(f"{name} ({variant.recipe or 'fp32'}) parity failed: {', '.join(problems)}")
    return failures
