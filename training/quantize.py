"""Graph recipes for the exported model: attention fusion, and the int8 recipes export tries in turn.

All work on any BERT-style encoder the export writes (nothing is tied to the shipped model):

- ``fuse_transformer``: onnxruntime's transformer optimizer (fused Attention, EmbedLayerNormalization,
  SkipLayerNormalization, BiasGelu) on a graph exported with eager attention, whose pattern it matches.
- ``rowscaled-int8`` (fast): the fused graph, every transformer MatMul fed by its input divided by the
  row's (token's) absolute maximum and the output multiplied back, then dynamic int8 with per-channel
  weights (MatMulInteger, QAttention). Dividing per token keeps the few tokens with massive activations
  (e.g. [CLS] at ~30 against ~5 elsewhere) from setting one coarse scale for the whole tensor.
- ``nbits8-b32`` (faithful): MatMulNBits 8-bit weights in blocks of 32, accuracy_level 4 (activations in
  int8 per block of 32), on the graph without attention fusion; embedding Gather dynamic int8.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np

NBITS_BLOCK = 32
RECIPES = {
    "rowscaled-int8": "fused attention; per-token scaled MatMuls; dynamic int8, per-channel weights "
    "(MatMulInteger, QAttention)",
    "nbits8-b32": "MatMulNBits 8-bit weights, block 32, symmetric, accuracy_level 4; "
    "dynamic int8 embedding Gather",
}
DEFAULT_RECIPES = ("rowscaled-int8", "nbits8-b32")  # fastest first; export keeps the first that passes


def fuse_transformer(src: Path, dst: Path, num_heads: int, hidden_size: int, attention: bool = True) -> dict:
    """Run onnxruntime's BERT optimizer; returns the fused operator counts."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    opts = FusionOptions("bert")
    opts.enable_attention = attention
    model = optimizer.optimize_model(
        str(src),
        model_type="bert",
        num_heads=num_heads,
        hidden_size=hidden_size,
        optimization_options=opts,
        opt_level=0,
    )
    model.save_model_to_file(str(dst))
    return {k: v for k, v in model.get_fused_operator_statistics().items() if v}


def transformer_nodes(model, attention: bool = True) -> list[str]:
    """The encoder's MatMuls with a constant weight (and its fused Attention nodes when ``attention``);
    the head and the in-scope projection, outside the ``transformer`` module, stay fp32."""
    inits = {i.name for i in model.graph.initializer}
    return [
        n.name
        for n in model.graph.node
        if (attention and n.op_type == "Attention")
        or (n.op_type == "MatMul" and n.input[1] in inits and "transformer" in n.name)
    ]


def scale_rows(model, names: set[str]):
    """Wrap each named MatMul: y = MatMul(x / r, W) * r with r = max(|x|) over the last axis (exact in
    fp32; after quantization every row gets its own effective activation scale)."""
    from onnx import helper, numpy_helper

    eps, axes = "rowscale_eps", "rowscale_axes"
    model.graph.initializer.append(numpy_helper.from_array(np.array(1e-6, np.float32), eps))
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
    if opset >= 18:  # ReduceMax takes its axes as an input from opset 18
        model.graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), axes))
        reduce = {"inputs": [axes], "attrs": {}}
    else:
        reduce = {"inputs": [], "attrs": {"axes": [-1]}}
    out = []
    for n in model.graph.node:
        if n.name not in names:
            out.append(n)
            continue
        x, y, p = n.input[0], n.output[0], n.name
        out += [
            helper.make_node("Abs", [x], [p + "_abs"], name=p + "_abs"),
            helper.make_node(
                "ReduceMax",
                [p + "_abs", *reduce["inputs"]],
                [p + "_rmax"],
                name=p + "_rmax",
                keepdims=1,
                **reduce["attrs"],
            ),
            helper.make_node("Max", [p + "_rmax", eps], [p + "_r"], name=p + "_r"),
            helper.make_node("Div", [x, p + "_r"], [p + "_xn"], name=p + "_xn"),
        ]
        n.input[0], n.output[0] = p + "_xn", p + "_yn"
        out += [n, helper.make_node("Mul", [p + "_yn", p + "_r"], [y], name=p + "_ys")]
    del model.graph.node[:]
    model.graph.node.extend(out)
    return model


def quantize(recipe: str, fused: Path, plain: Path, dst: Path) -> str:
    """Write the int8 graph of ``recipe`` (from the fused or the plain fp32 graph); returns its description."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if recipe == "rowscaled-int8":
        model = onnx.load(str(fused))
        matmuls = set(transformer_nodes(model, attention=False))
        nodes = transformer_nodes(model)
        with tempfile.TemporaryDirectory(prefix="int8-") as tmp:
            staged = Path(tmp) / "rowscaled.onnx"
            onnx.save(scale_rows(model, matmuls), str(staged))
            quantize_dynamic(
                str(staged),
                str(dst),
                weight_type=QuantType.QInt8,
                per_channel=True,
                op_types_to_quantize=["MatMul", "Attention"],
                nodes_to_quantize=nodes,
                extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
            )
    elif recipe == "nbits8-b32":
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quantizer = MatMulNBitsQuantizer(
            onnx.load(str(plain)), bits=8, block_size=NBITS_BLOCK, is_symmetric=True, accuracy_level=4
        )
        quantizer.process()
        with tempfile.TemporaryDirectory(prefix="int8-") as tmp:
            staged = Path(tmp) / "matmul_nbits.onnx"
            quantizer.model.save_model_to_file(str(staged))
            quantize_dynamic(
                str(staged), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["Gather"]
            )
    else:
        raise ValueError(f"unknown int8 recipe {recipe!r}; choose from {sorted(RECIPES)}")
    return f"{recipe}: {RECIPES[recipe]}"
