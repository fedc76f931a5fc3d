"""A trainable body recovered from an exported graph, for a model that ships without its checkpoint.

Exported models ship their ONNX graph, not the SetFit checkpoint (models/README.md), so a student could
only be distilled on a machine that had built the teacher. The graph holds every weight of the body,
though: the LayerNorms, biases and (in the shipped recipes) the attention projections in fp32 under
their torch names, the other projections as MatMulNBits blocks and the embedding tables as uint8 with a
scale. ``recover_body`` reads them back into the base model's architecture, dequantizing what was
quantized, so the recovered body computes what the graph's weights compute. It is the graph's body, not
the checkpoint's: a quantized weight comes back within half a quantization step of the original.

The heads' weights are read the same way (``graph_head``, ``graph_scope``, ``graph_one_vs_rest``);
training.readback puts body and heads together as the whole model.

Graphs whose encoder runs int8 activations through MatMulInteger or QAttention (the ``rowscaled-int8``
recipes, used by students) are refused: a teacher ships through the weight-only recipes.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from router.manifest import Manifest, ModelError, load_manifest, verify_file

# the IntentGraph's attribute that holds the transformer (training.export._graph_module): the torch names of
# the body's parameters appear in the graph under this scope
BODY_SCOPE = "transformer"
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
_UNSUPPORTED = {
    "MatMulInteger",
    "QAttention",
    "DynamicQuantizeMatMul",
    "QLinearMatMul",
    "MatMulIntegerToFloat",
}
_LAYER = re.compile(r"/" + BODY_SCOPE + r"/encoder/layer\.(\d+)/")


def graph_tensors(model) -> tuple[dict[str, np.ndarray], list[str]]:
    """The body's parameters in an ONNX graph (an ``onnx.ModelProto``), by their names inside the
    transformer (``encoder.layer.0.attention.self.query.weight``), as float32 in torch's layout; and the
    names that came back from quantized weights."""
    from onnx import numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    prefix = BODY_SCOPE + "."
    out: dict[str, np.ndarray] = {}
    quantized: list[str] = []

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    for name in inits:  # parameters under their torch names: LayerNorms, biases, embeddings
        if not name.startswith(prefix):
            continue
        key = name[len(prefix) :]
        if key.endswith("_quantized"):  # a table quantized per tensor: (q - zero point) * scale
            key, stem = key[: -len("_quantized")], name[: -len("_quantized")]
            scale, zero = array(stem + "_scale"), stem + "_zero_point"
            if np.asarray(scale).size != 1:
                raise ModelError(f"{name}: only per-tensor quantized tables can be recovered")
            zp = array(zero).astype(np.float32) if zero in inits else np.float32(0)
            out[key] = ((array(name).astype(np.float32) - zp) * scale.astype(np.float32)).astype(np.float32)
            quantized.append(key)
        elif key.endswith(("_scale", "_zero_point")):
            continue
        elif inits[name].data_type == 1:  # FLOAT
            out[key] = array(name).astype(np.float32)
    for node in model.graph.node:
        inside = node.name.startswith("/" + BODY_SCOPE + "/") or any(_LAYER.search(o) for o in node.output)
        if not inside:
            continue
        if node.op_type in _UNSUPPORTED:
            raise ModelError(
                f"the graph's {node.op_type} node {node.name} runs int8 activations (a rowscaled-int8 or "
                "dynamic int8 recipe): its body cannot be recovered; use the model's fp32 graph or its checkpoint"
            )
        if node.op_type == "MatMul" and node.input[1] in inits:
            out[_module(node.name) + ".weight"] = array(node.input[1]).astype(np.float32).T.copy()
        elif node.op_type == "MatMulNBits":
            key = _module(node.name) + ".weight"
            out[key] = _dequantize_nbits(node, array)
            quantized.append(key)
        elif node.op_type == "Attention" and node.input[1] in inits:
            match = _LAYER.search(node.output[0])
            if match is None:
                raise ModelError(f"cannot tell which layer the fused attention {node.name} belongs to")
            base = f"encoder.layer.{match.group(1)}.attention.self."
            weight, bias = array(node.input[1]).astype(np.float32), array(node.input[2]).astype(np.float32)
            sizes = _attr(node, "qkv_hidden_sizes") or [weight.shape[1] // 3] * 3
            cuts = np.cumsum([0, *sizes])
            for k, part in enumerate(("query", "key", "value")):
                out[base + part + ".weight"] = weight[:, cuts[k] : cuts[k + 1]].T.copy()
                out[base + part + ".bias"] = bias[cuts[k] : cuts[k + 1]].copy()
    return out, quantized


def _module(node_name: str) -> str:
    """'/transformer/encoder/layer.0/intermediate/dense/MatMul_Q8' -> 'encoder.layer.0.intermediate.dense'."""
    parts = node_name.strip("/").split("/")
    if len(parts) < 3 or parts[0] != BODY_SCOPE:
        raise ModelError(f"cannot tell which module the graph's node {node_name!r} belongs to")
    return ".".join(parts[1:-1])


def _attr(node, name: str):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return None


def _dequantize_nbits(node, array) -> np.ndarray:
    """A MatMulNBits weight as torch's (out, in) float32: blocks of ``block_size`` along the input, each
    (q - zero point) * scale; no zero points means the middle of the range (2^(bits - 1))."""
    k, n, bits, block = (int(_attr(node, a)) for a in ("K", "N", "bits", "block_size"))
    if bits not in (4, 8):
        raise ModelError(f"{node.name}: MatMulNBits with {bits} bits cannot be recovered (4 or 8)")
    if len(node.input) > 4 and node.input[4]:
        raise ModelError(f"{node.name}: MatMulNBits with a g_idx (act-order) cannot be recovered")
    if len(node.input) > 5 and node.input[5]:
        raise ModelError(f"{node.name}: MatMulNBits with its own bias cannot be recovered")
    blocks = -(-k // block)
    q = array(node.input[1]).reshape(n, -1)
    if bits == 4:  # two values a byte, the low nibble first
        q = np.stack([q & 0x0F, q >> 4], axis=-1).reshape(n, -1)
    q = q[:, : blocks * block].reshape(n, blocks, block).astype(np.float32)
    scales = array(node.input[2]).astype(np.float32).reshape(n, blocks)
    if len(node.input) > 3 and node.input[3]:
        zp = array(node.input[3])
        if zp.dtype == np.uint8:
            zp = zp.reshape(n, -1)
            if bits == 4:
                zp = np.stack([zp & 0x0F, zp >> 4], axis=-1).reshape(n, -1)
            zp = zp[:, :blocks].astype(np.float32)
        else:  # float zero points, in the scales' shape
            zp = zp.astype(np.float32).reshape(n, blocks)
    else:
        zp = np.full((n, blocks), 2 ** (bits - 1), dtype=np.float32)
    w = (q - zp[:, :, None]) * scales[:, :, None]
    return w.reshape(n, blocks * block)[:, :k].astype(np.float32)


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
    import torch
    from sentence_transformers import SentenceTransformer

    from training.config import resolve_base_model

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    variants = manifest.export.variants if manifest.export is not None else {}
    if not variants:
        raise ModelError(f"{model_dir} has no exported graph to recover a body from")
    if variant is None:
        fp32 = variants.get("fp32")
        variant = (
            "fp32"
            if fp32 is not None and (model_dir / fp32.file.path).is_file()
            else manifest.export.default_variant
        )
    if variant not in variants:
        raise ModelError(f"{model_dir} has no {variant!r} graph (it has {', '.join(variants)})")
    entry = variants[variant]
    path = verify_file(model_dir, entry.file)
    graph = onnx.load(str(path))
    tensors, quantized = graph_tensors(graph)

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
        "weights": len(tensors),
        "kept_from_base": kept,
        **check,
    }
    return Recovered(body, manifest, note, graph, dict(zip(outputs, rows, strict=True)))


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
        f"{note['dequantized']} dequantized; its embeddings against the graph's on {note['probe_texts']} texts: "
        f"cosine >= {note['min_cosine']:.6f}"
    )


class _Walk:
    """Reads a head back from the graph, node by node from its output, in the form training.export writes
    it; any other form is refused with ``shape`` named."""

    def __init__(self, graph, output: str, shape: str):
        self.graph = graph
        self.made = {o: n for n in graph.graph.node for o in n.output}
        self.error = f"cannot read the graph's {output!r}: it is not {shape}"

    def node(self, name: str, op: str):
        node = self.made.get(name)
        if node is None or node.op_type != op:
            raise ModelError(self.error)
        return node

    def operands(self, node, op: str):
        """The ``op`` node that makes one input of ``node``, and the name of the other input."""
        if len(node.input) == 2:
            for k, name in enumerate(node.input):
                if name in self.made and self.made[name].op_type == op:
                    return self.made[name], node.input[1 - k]
        raise ModelError(self.error)

    def constant(self, name: str) -> np.ndarray:
        return _constant(self.graph, name)


def graph_head(graph, output: str) -> tuple[np.ndarray, np.ndarray, float]:
    """The logistic head in front of the graph's ``output``, Softmax(scale * (x @ W + b)): ``(coef (labels,
    width), intercept (labels,), scale)``; scale is 1 / T."""
    walk = _Walk(graph, output, "Softmax(scale * (x @ W + b))")
    add, scale = walk.operands(walk.node(walk.node(output, "Softmax").input[0], "Mul"), "Add")
    matmul, bias = walk.operands(add, "MatMul")
    factor = float(np.asarray(walk.constant(scale)).reshape(-1)[0])
    coef = walk.constant(matmul.input[1]).T.astype(np.float32)
    return coef, walk.constant(bias).reshape(-1).astype(np.float32), factor


def graph_scope(graph, output: str) -> tuple[np.ndarray, np.ndarray]:
    """The in-scope distance the graph computes as ``output``, the smallest over the classes of
    ||x @ F - C||^2: ``(factor F (width, width), centres C (classes, width))``, C being the class means
    times F."""
    walk = _Walk(graph, output, "ReduceMin(ReduceSum((x @ F - C) ** 2))")
    power = walk.node(walk.node(walk.node(output, "ReduceMin").input[0], "ReduceSum").input[0], "Pow")
    if float(np.asarray(walk.constant(power.input[1])).reshape(-1)[0]) != 2.0:
        raise ModelError(walk.error)
    sub = walk.node(power.input[0], "Sub")
    matmul = walk.node(walk.node(sub.input[0], "Unsqueeze").input[0], "MatMul")
    factor = walk.constant(matmul.input[1]).astype(np.float64)
    return factor, walk.constant(sub.input[1]).astype(np.float64).reshape(-1, factor.shape[1])


def graph_one_vs_rest(graph, output: str) -> tuple[np.ndarray, np.ndarray]:
    """The compound head's one-vs-rest scores the graph computes as ``output``, Sigmoid(x @ W + b):
    ``(coef (intents, width), intercept (intents,))``."""
    walk = _Walk(graph, output, "Sigmoid(x @ W + b)")
    matmul, bias = walk.operands(walk.node(walk.node(output, "Sigmoid").input[0], "Add"), "MatMul")
    coef = walk.constant(matmul.input[1]).T.astype(np.float32)
    return coef, walk.constant(bias).reshape(-1).astype(np.float32)


def _constant(graph, name: str) -> np.ndarray:
    """An initializer or a Constant node's value."""
    from onnx import numpy_helper

    for init in graph.graph.initializer:
        if init.name == name:
            return numpy_helper.to_array(init)
    for node in graph.graph.node:
        if node.op_type == "Constant" and node.output[0] == name:
            return numpy_helper.to_array(_attr(node, "value"))
    raise ModelError(f"the graph's {name!r} is not a constant")


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
