"""The weights of an exported model read back out of its ONNX graph, as float32 in torch's layout.

The graph holds every weight of the body: the LayerNorms, biases and (in the shipped recipes) the attention
projections in fp32 under their torch names, the other projections as MatMulNBits blocks and the embedding
tables as uint8 with a scale. ``graph_tensors`` reads them back under their torch names, dequantizing what
was quantized, so a body given them computes what the graph's weights compute; a quantized weight comes back
within half a quantization step of the original. The heads' weights are read the same way, from the form
training.export.exporter writes them in (``graph_head``, ``graph_scope``, ``graph_one_vs_rest``).

A MatMulInteger's weight (the ``rowscaled`` recipes) comes back as its int8 values times their per-channel
scale, its rows divided back by the smoothing of its input when the recipe smoothed it
(training.export.smoothing): a body with those weights computes in fp32 what the graph computes with int8
activations, within their rounding, which the recovery's check bounds. QAttention, whose Q, K and V weights
are quantized with its input's scale, and the other int8-activation operators are refused.
"""

from __future__ import annotations

import re

import numpy as np

from router.manifest import ModelError

# the IntentGraph's attribute that holds the transformer (training.export.exporter._graph_module): the torch names of
# the body's parameters appear in the graph under this scope
BODY_SCOPE = "transformer"
_UNSUPPORTED = {
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
    made = {o: n for n in model.graph.node for o in n.output}
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
        if node.op_type == "MatMulInteger" and node.input[1] in inits:
            key = _module(node.name) + ".weight"
            out[key] = _dequantize_integer(node, array, inits, made)
            quantized.append(key)
        elif node.op_type == "MatMul" and node.input[1] in inits:
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


def _dequantize_integer(node, array, inits, made) -> np.ndarray:
    """A MatMulInteger weight as torch's (out, in) float32: (q - zero point) * scale per output channel,
    each input row times the smoothing its input was multiplied by (the constant of the Mul in front of
    the row scaling: x * c / max|x * c| -> (Dynamic)QuantizeLinear), if any."""
    weight, zero = node.input[1], node.input[3] if len(node.input) > 3 else ""
    stem = weight[: -len("_quantized")] if weight.endswith("_quantized") else weight
    if stem + "_scale" not in inits:
        raise ModelError(f"{node.name}: the scale of its int8 weight {weight!r} is not in the graph")
    w = array(weight).astype(np.float32) - (array(zero).astype(np.float32) if zero in inits else 0.0)
    w *= array(stem + "_scale").astype(np.float32).reshape(1, -1)
    source = made.get(node.input[0])  # (Dynamic)QuantizeLinear <- Div(x, row max) <- Mul(x, smoothing)?
    if source is not None and source.op_type in ("DynamicQuantizeLinear", "QuantizeLinear"):
        div = made.get(source.input[0])
        smooth = made.get(div.input[0]) if div is not None and div.op_type == "Div" else None
        if smooth is not None and smooth.op_type == "Mul":
            const = [i for i in smooth.input if i in inits]
            if const:
                w *= array(const[0]).astype(np.float32).reshape(-1, 1)
    return w.T.copy()


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


class _Walk:
    """Reads a head back from the graph, node by node from its output, in the form training.export.exporter writes
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
