"""A trainable body recovered from an exported graph, for a model that ships without its checkpoint.

Exported models ship their ONNX graph, not the SetFit checkpoint (models/README.md), so a student could
only be distilled on a machine that had built the teacher. The graph holds every weight of the body,
though (training.export.graph_weights). ``recover_body`` reads them back into the base model's architecture,
dequantizing what was quantized, so the recovered body computes what the graph's weights compute, and
checks its embeddings against the graph's own on ``PROBE_TEXTS``. It is the graph's body, not the
checkpoint's: a quantized weight comes back within half a quantization step of the original.

training.export.readback puts the body and the heads' weights (training.export.graph_weights) together as the whole model.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.manifest import Manifest, ModelError, load_manifest, verify_file
from training.export.graph_weights import BODY_SCOPE, graph_tensors
from training.export.half_storage import full_precision, half_casts

RECOVERY_NOTE = "recovered.json"
# texts the recovered body and the graph embed, to check the recovery (any text would do)
PROBE_TEXTS = (
    "find the latest quarterly report on churn",
    "why did the deploy fail last night, walk me through it",
    "plan a three-day offsite for the design team in lisbon",
    "what did i tell you about my allergy last week?",
    "send the invoice to maria and cc finance",
    "thanks, that's all for now",
    "compare postgres and sqlite for an embedded analytics tool and recommend one",
    "remind me what we decided about the api versioning",
)
# below this, the recovered body does not compute what the graph computes (a mapping gone wrong): the shipped
# int8 graph, whose activations are int8 too, gives 0.9998; the base model's own body below 0.9
MIN_COSINE = 0.99


@dataclass(frozen=True)
class Recovered:
    """A body read back from a graph (``recovered_body``), its model's manifest, the graph, and the graph's
    outputs on PROBE_TEXTS (those the manifest names), which recovered heads are checked against."""

    body: Any  # a sentence_transformers.SentenceTransformer
    manifest: Manifest
    note: dict
    graph: Any  # an onnx.ModelProto
    probe: dict[str, np.ndarray]  # the graph's outputs on PROBE_TEXTS, by name


def recovered_body(
    model_dir: str | Path, variant: str | None = None, base_model: str | None = None
) -> Recovered:
    """The body of the exported model in ``model_dir`` read back from ``variant``'s
    graph (default: fp32 when its file is there, else the default variant) into the architecture of
    ``base_model`` (default: the manifest's), checked against the graph (``MIN_COSINE``); its ``note`` is
    what ``RECOVERY_NOTE`` records. Parameters the graph does not use (BERT's pooler) keep the base model's
    values."""
    import onnx

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    variants = manifest.export.variants if manifest.export is not None else {}
    if not variants:
        raise ModelError(f"{model_dir} has no exported graph to recover a body from")
    variant = variant or _graph_to_read(model_dir, manifest)
    if variant not in variants:
        raise ModelError(f"{model_dir} has no {variant!r} graph (it has {', '.join(variants)})")
    entry = variants[variant]
    path = verify_file(model_dir, entry.file)
    graph = onnx.load(str(path))
    halved = len(half_casts(graph))
    graph = full_precision(
        graph
    )  # weights stored in half precision, as float32 (training.export.half_storage)
    tensors, quantized = graph_tensors(graph)

    body, kept = _load_into_base(tensors, manifest, base_model)
    outputs = [manifest.export.output]
    outputs += [part.output for part in (manifest.in_scope, manifest.compound) if part is not None]
    emb, *rows = _probe_outputs(
        graph, body.tokenizer, manifest.max_seq_length, [_embedding_tensor(graph), *outputs]
    )
    check = _compare_embeddings(body, emb)
    if check["min_cosine"] < MIN_COSINE:
        raise ModelError(
            f"the body read from {path.name} does not embed text as the graph does (cosine "
            f"{check['min_cosine']:.4f} < {MIN_COSINE} on {check['probe_texts']} texts): nothing written"
        )
    note = {
        "model_id": manifest.model_id,
        "variant": variant,
        "graph": entry.file.path,
        "graph_sha256": entry.file.sha256,
        "recipe": entry.recipe,
        "dequantized": len(quantized),
        "half_precision": halved,  # tensors stored as float16: each weight within float16's rounding
        "weights": len(tensors),
        "kept_from_base": kept,
        **check,
    }
    return Recovered(body, manifest, note, graph, dict(zip(outputs, rows, strict=True)))


def _graph_to_read(model_dir: Path, manifest: Manifest) -> str:
    """fp32 when its file is there, else the default variant."""
    fp32 = manifest.export.variants.get("fp32")
    return (
        "fp32"
        if fp32 is not None and (model_dir / fp32.file.path).is_file()
        else manifest.export.default_variant
    )


def _load_into_base(tensors: dict, manifest: Manifest, base_model: str | None):
    """The base model with the graph's weights copied in (in eval mode), and the names of the parameters
    the graph does not have (BERT's pooler), which keep the base model's values."""
    import torch
    from sentence_transformers import SentenceTransformer

    from training.train_config import resolve_base_model

    base = resolve_base_model(base_model or manifest.base_model)
    body = SentenceTransformer(base, device="cpu")
    body.max_seq_length = manifest.max_seq_length
    params = dict(body[0].auto_model.named_parameters())
    unused = sorted(set(tensors) - set(params))
    if unused:
        raise ModelError(
            f"the graph has weights the base model {base_model or manifest.base_model} does not: "
            f"{', '.join(unused[:5])}{' ...' if len(unused) > 5 else ''} (name the model's own base model)"
        )
    kept = sorted(name for name in params if name not in tensors)
    if any(not name.startswith("pooler.") for name in kept):
        raise ModelError(f"the graph lacks these weights of the body: {', '.join(kept[:5])}")
    with torch.no_grad():
        for name, value in tensors.items():
            p = params[name]
            if tuple(p.shape) != value.shape:
                raise ModelError(
                    f"{name}: the graph's weight is {value.shape}, the base model's {tuple(p.shape)} "
                    "(a narrowed or cut student cannot be recovered into its base model)"
                )
            p.copy_(torch.from_numpy(value))
    body.eval()
    return body, kept


def recover_body(
    model_dir: str | Path,
    out_dir: str | Path,
    variant: str | None = None,
    base_model: str | None = None,
    report: Callable[[str], None] = print,
) -> dict:
    """Write the body of the exported model in ``model_dir`` (``recovered_body``) to ``out_dir`` as a
    sentence-transformers folder (what a teacher's ``checkpoint/`` holds), with ``RECOVERY_NOTE``: the
    source graph, which weights were dequantized, and how close the recovered body's embeddings are to the
    graph's own on ``PROBE_TEXTS``. Returns the note."""
    rec = recovered_body(model_dir, variant, base_model)
    write_recovered(out_dir, rec.body.save, rec.note)
    report(recovered_line(rec.note))
    return rec.note


def write_recovered(out_dir: str | Path, save: Callable[[str], object], note: dict) -> None:
    """The recovered model, saved by ``save`` into ``out_dir``, and its ``RECOVERY_NOTE``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    save(str(out_dir))
    (out_dir / RECOVERY_NOTE).write_text(json.dumps(note, indent=2) + "\n", encoding="utf-8")


def recovered_line(note: dict) -> str:
    recipe = f", {note['recipe']}" if note["recipe"] else ""
    return (
        f"body recovered from {Path(note['graph']).name} ({note['variant']}{recipe}): {note['weights']} weights, "
        f"{note['dequantized']} dequantized, {note.get('half_precision', 0)} stored in half precision; its "
        f"embeddings against the graph's on {note['probe_texts']} texts: cosine >= {note['min_cosine']:.6f}"
    )


def _check(graph, body, max_length: int) -> dict:
    """The recovered body's normalised embeddings against the graph's own (the input of its head), on
    PROBE_TEXTS: the lowest cosine, and the largest absolute difference."""
    (theirs,) = _probe_outputs(graph, body.tokenizer, max_length, [_embedding_tensor(graph)])
    return _compare_embeddings(body, theirs)


def _compare_embeddings(body, theirs: np.ndarray) -> dict:
    ours = body.encode(list(PROBE_TEXTS), normalize_embeddings=True, convert_to_numpy=True)
    theirs = np.asarray(theirs, dtype=np.float32)
    theirs /= np.linalg.norm(theirs, axis=1, keepdims=True)
    cos = (ours * theirs).sum(axis=1)
    return {
        "probe_texts": len(PROBE_TEXTS),
        "min_cosine": float(cos.min()),
        "max_abs_diff": float(np.abs(ours - theirs).max()),
    }


def _probe_outputs(graph, tokenizer, max_length: int, names: Sequence[str]) -> list[np.ndarray]:
    """The graph's tensors ``names`` (graph outputs or inner tensors) on PROBE_TEXTS, one text at a time:
    an array per name, a row per text."""
    import onnx
    import onnxruntime as ort

    g = onnx.ModelProto()
    g.CopyFrom(graph)
    outputs = {o.name for o in g.graph.output}
    g.graph.output.extend(onnx.helper.make_empty_tensor_value_info(n) for n in names if n not in outputs)
    with tempfile.TemporaryDirectory() as tmp:  # the graph may be over protobuf's 2 GB in-memory limit
        probe = Path(tmp) / "probe.onnx"
        onnx.save(g, str(probe))
        session = ort.InferenceSession(str(probe), providers=["CPUExecutionProvider"])
    rows: list[list[np.ndarray]] = [[] for _ in names]
    for text in PROBE_TEXTS:
        enc = tokenizer([text], truncation=True, max_length=max_length, return_tensors="np")
        feed = {k: enc[k].astype(np.int64) for k in ("input_ids", "attention_mask")}
        for k, value in enumerate(session.run(list(names), feed)):
            rows[k].append(value[0])
    return [np.asarray(r) for r in rows]


def _embedding_tensor(graph) -> str:
    """The pooled embedding the heads read: the first input the head's MatMuls (outside the body) share."""
    inits = {i.name for i in graph.graph.initializer}
    heads = [
        n
        for n in graph.graph.node
        if n.op_type == "MatMul" and not n.name.startswith("/" + BODY_SCOPE + "/") and n.input[1] in inits
    ]
    if not heads:
        raise ModelError("cannot find the graph's head (a MatMul on the pooled embedding)")
    return heads[0].input[0]
