"""Graph recipes for the exported model: attention fusion, and the int8 recipes export tries in turn.

All work on any BERT-style encoder the export writes (nothing is tied to the shipped model):

- ``fuse_transformer``: onnxruntime's transformer optimizer (fused Attention, EmbedLayerNormalization,
  SkipLayerNormalization, BiasGelu) on a graph exported with eager attention, whose pattern it matches.
- ``rowscaled-int8`` (fast): the fused graph, every transformer MatMul fed by its input divided by the
  row's (token's) absolute maximum and the output multiplied back, then dynamic int8 with per-channel
  weights (MatMulInteger, QAttention). Dividing per token keeps the few tokens with massive activations
  (e.g. [CLS] at ~30 against ~5 elsewhere) from setting one coarse scale for the whole tensor. With
  ``portable=True`` the weights keep 7 bits, so that CPUs without VNNI compute the same integers.
- ``rowscaled-int8-smooth-fp32attn``: the same MatMuls, their inputs smoothed per channel first
  (training.export.smoothing, measured on calibration texts at export) and, once row-scaled, quantized
  over their fixed range [-1, 1], with every fused Attention (the Q, K, V projections and the scores) kept
  fp32. QAttention quantizes its input with one scale per tensor, not per token, so the attention is
  where rowscaled-int8 loses most, and why batch mates move each other's probabilities; here a message
  gets the same integers in any batch, and the other MatMuls keep their int8 speed-up.
  ``rowscaled-int8-smooth50-fp32attn`` and ``-smooth70-`` are the same with the smoothing's alpha 0.5
  and 0.7 instead of 0.6: a training run whose graph misses parity at one alpha may pass at another.
- ``rowscaled-int8-keepK``: the same, except the K encoder nodes whose int8 version alone moves the
  probabilities most on a calibration sample (``rank_sensitivity``, measured at export) are left out:
  their MatMuls become MatMulNBits 8-bit (block 32), a fused Attention stays fp32. With
  ``kept_fp32=True`` the kept MatMuls stay fp32 too: exact, and faster where MatMulNBits is slow (CPUs
  without VNNI).
- ``fused-nbits8-b32`` (faithful): the fused graph, its encoder MatMuls MatMulNBits 8-bit (block 32,
  accuracy_level 4: activations int8 per block of 32), the fused Attention (Q, K, V and the scores) fp32;
  the embedding lookup is left unfused so that its Gather goes dynamic int8 (the table is most of the size).
- ``fused-nbits8-b32-fp32emb``: the same encoder MatMuls and attention, with the embedding table fp32 and
  fused (EmbedLayerNormalization): about twice the file, the same compute, and none of the int8 table's
  rounding (it costs the shipped bodies about 0.04 of max |dp|).
- ``nbits8-b32``: MatMulNBits 8-bit weights in blocks of 32, accuracy_level 4, on the graph without
  attention fusion, so the Q, K and V projections go int8 too; embedding Gather dynamic int8.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from training.export.smoothing import ROW_SCALED, SMOOTHING_ALPHA, fixed_range_inputs, smooth_matmuls

NBITS_BLOCK = 32
# x86 CPUs without VNNI (AVX2 only) multiply rowscaled-int8's uint8 activations by its int8 weights with
# vpmaddubsw, which sums each pair of products into int16 and saturates: 255 * 127 * 2 > 32767. VNNI and
# ARM dot products sum in int32 and are exact. ``portable=True`` keeps the weights to 7 bits
# (onnxruntime's reduce_range): no pair can overflow, so the graph computes the same integers on every
# CPU, at twice the weight rounding error (on the fast model's student: mean |dp| 0.0010 against 0.0005,
# and its all-MatMul graph fails parity where the 8-bit one passes). The
# default is 8 bits: int8 pays on VNNI and ARM CPUs, and on AVX2-only ones fp32 is about as fast.
PORTABLE_WEIGHT_BITS = 7
# On an AVX2-only CPU MatMulNBits is slower than an fp32 MatMul (the 6-layer graph: 3.95 against 3.43 ms),
# so a -keepK graph whose kept MatMuls stay fp32 ran 1.27x faster in batches there (727 against 574
# msg/s, 3-layer student). On VNNI CPUs MatMulNBits is the faster one, so it
# stays the default.
KEPT_FP32 = "; its kept MatMuls fp32, not MatMulNBits"


@dataclass(frozen=True)
class Recipe:
    """An int8 recipe, typed: what it quantizes and how, read by ``quantize`` (never parsed from its name).

    ``family``: ``rowscaled`` (per-token scaled MatMuls, dynamic int8) or ``nbits`` (MatMulNBits 8-bit
    weights, block 32). ``fused``: from the attention-fused graph, whose Attention stays fp32 in the nbits
    recipes and, with ``attention="float"``, in a rowscaled one. ``smoothed``: a rowscaled recipe's MatMul
    inputs are smoothed per channel first and quantized over a fixed range (training.export.smoothing),
    ``alpha`` saying how much of each channel's range moves into the weights. ``embedding``: the
    embedding table as a dynamic int8 Gather (``int8``) or left floating point (``float``: fused
    EmbedLayerNormalization; stored fp32, or fp16 with ``int8_half_weights``). ``keep``: how many of the
    most sensitive encoder nodes stay out of int8."""

    name: str
    family: Literal["rowscaled", "nbits"]
    fused: bool
    embedding: Literal["int8", "float"]
    description: str
    keep: int = 0
    attention: Literal["int8", "float"] = "int8"
    smoothed: bool = False
    alpha: float = SMOOTHING_ALPHA


_NBITS = "MatMulNBits 8-bit weights, block 32, symmetric, accuracy_level 4"
KEEP_STEPS = (2, 4, 6)
RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            "rowscaled-int8",
            "rowscaled",
            True,
            "int8",
            "fused attention; per-token scaled MatMuls; dynamic int8, per-channel weights "
            "(MatMulInteger, QAttention)",
        ),
        *(
            Recipe(
                f"rowscaled-int8-smooth{'' if alpha == SMOOTHING_ALPHA else round(alpha * 100)}-fp32attn",
                "rowscaled",
                True,
                "int8",
                f"rowscaled-int8 with its MatMul inputs smoothed per channel (alpha {alpha}) and every fused "
                "Attention fp32",
                attention="float",
                smoothed=True,
                alpha=alpha,
            )
            for alpha in (SMOOTHING_ALPHA, 0.5, 0.7)
        ),
        *(
            Recipe(
                f"rowscaled-int8-keep{k}",
                "rowscaled",
                True,
                "int8",
                f"rowscaled-int8 except the {k} most sensitive encoder nodes (MatMulNBits 8-bit b32, Attention fp32)",
                keep=k,
            )
            for k in KEEP_STEPS
        ),
        Recipe(
            "fused-nbits8-b32", "nbits", True, "int8", f"fused attention kept fp32; encoder MatMuls {_NBITS}"
        ),
        Recipe(
            "fused-nbits8-b32-fp32emb",
            "nbits",
            True,
            "float",
            f"fused attention kept fp32; encoder MatMuls {_NBITS}; embedding table fp32",
        ),
        Recipe("nbits8-b32", "nbits", False, "int8", f"{_NBITS}; dynamic int8 embedding Gather"),
    )
}
# Fastest first; export keeps the first that passes with margin. rowscaled-int8-smooth-fp32attn, next,
# keeps most of rowscaled-int8's speed-up on VNNI CPUs (docs/speed.md). The -keepK recipes are opt-in
# (`export --export-recipes`): their sensitivity pass costs about a minute and, on the shipped model, they
# kept less than half of rowscaled-int8's speed-up. fused-nbits8-b32 comes before
# nbits8-b32: it is faster (fused attention) and more faithful (attention in fp32); its fp32-embedding
# twin, as fast and more faithful again, costs the size of the table.
DEFAULT_RECIPES = (
    "rowscaled-int8",
    "rowscaled-int8-smooth-fp32attn",
    "fused-nbits8-b32",
    "fused-nbits8-b32-fp32emb",
    "nbits8-b32",
)
ALL_RECIPES = tuple(RECIPES)


def check_recipes(recipes: Sequence[str]) -> None:
    """Refuse names that are not int8 recipes, before any work is done."""
    unknown = sorted(set(recipes) - set(RECIPES))
    if unknown:
        raise ValueError(f"unknown int8 recipes {unknown}; choose from {sorted(RECIPES)}")


def kept_count(recipe: str) -> int:
    """How many sensitive nodes ``recipe`` keeps out of int8 (0 for the recipes without a ``-keepK``)."""
    return RECIPES[recipe].keep


def fuse_transformer(
    src: Path, dst: Path, num_heads: int, hidden_size: int, attention: bool = True, embedding: bool = True
) -> dict:
    """Run onnxruntime's BERT optimizer; returns the fused operator counts. ``embedding=False`` leaves the
    embedding lookup a plain Gather (which dynamic int8 can quantize) instead of EmbedLayerNormalization."""
    from onnxruntime.transformers import optimizer
    from onnxruntime.transformers.fusion_options import FusionOptions

    opts = FusionOptions("bert")
    opts.enable_attention = attention
    opts.enable_embed_layer_norm = embedding
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
            helper.make_node("Div", [x, p + "_r"], [p + ROW_SCALED], name=p + ROW_SCALED),
        ]
        n.input[0], n.output[0] = p + ROW_SCALED, p + "_yn"
        out += [n, helper.make_node("Mul", [p + "_yn", p + "_r"], [y], name=p + "_ys")]
    del model.graph.node[:]
    model.graph.node.extend(out)
    return model


def _rowscaled(
    fused: Path,
    dst: Path,
    keep: Sequence[str] = (),
    only: Sequence[str] | None = None,
    portable: bool = False,
    kept_fp32: bool = False,
    attention: bool = True,
    smooth_feeds: Sequence[dict] = (),
    alpha: float = SMOOTHING_ALPHA,
) -> None:
    """rowscaled-int8 on the encoder nodes of ``fused`` (or just ``only``) except ``keep``; kept MatMuls
    become MatMulNBits 8-bit (``kept_fp32``: stay fp32), a kept Attention stays fp32, as every Attention
    does without ``attention``. ``portable``: 7-bit weights (PORTABLE_WEIGHT_BITS). ``smooth_feeds``: the
    calibration batches on which the MatMul inputs are smoothed (by ``alpha``), then quantized over a fixed
    range (none: neither)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    model = onnx.load(str(fused))
    matmuls = set(transformer_nodes(model, attention=False))
    nodes = [
        n
        for n in transformer_nodes(model, attention=attention)
        if n not in keep and (only is None or n in only)
    ]
    with tempfile.TemporaryDirectory(prefix="int8-") as tmp:
        staged, mixed = Path(tmp) / "rowscaled.onnx", Path(tmp) / "mixed.onnx"
        if smooth_feeds:
            model = smooth_matmuls(model, matmuls & set(nodes), smooth_feeds, alpha)
        onnx.save(scale_rows(model, matmuls & set(nodes)), str(staged))
        to_nbits = bool(keep) and not kept_fp32  # the kept MatMuls go MatMulNBits in a second pass
        quantized = mixed if to_nbits else dst
        quantize_dynamic(
            str(staged),
            str(quantized),
            weight_type=QuantType.QInt8,
            per_channel=True,
            op_types_to_quantize=["MatMul", "Attention"],
            nodes_to_quantize=nodes,
            reduce_range=portable,
            extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
        )
        if smooth_feeds:  # batch-independent integers: the fixed range of row-scaled inputs
            onnx.save(fixed_range_inputs(onnx.load(str(quantized))), str(quantized))
        if to_nbits:
            _nbits(onnx.load(str(mixed)), dst, [n for n in keep if n in matmuls])


def _nbits(model, dst: Path, nodes: Sequence[str] | None = None) -> None:
    """MatMulNBits 8-bit on ``nodes`` (every MatMul when None). The quantizer's ``nodes_to_include`` adds
    to the MatMuls it takes anyway, so the others are named in ``nodes_to_exclude``: the heads stay fp32."""
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    wanted = None if nodes is None else set(nodes)
    quantizer = MatMulNBitsQuantizer(
        model,
        bits=8,
        block_size=NBITS_BLOCK,
        is_symmetric=True,
        accuracy_level=4,
        nodes_to_exclude=[n.name for n in model.graph.node if wanted is not None and n.name not in wanted],
    )
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst))


def _attention_shape(model) -> tuple[int, int] | None:
    """(num_heads, hidden_size) of a graph's fused Attention nodes, None when it has none."""
    inits = {i.name: i for i in model.graph.initializer}
    for n in model.graph.node:
        if n.op_type == "Attention" and n.input[1] in inits:
            heads = next(a.i for a in n.attribute if a.name == "num_heads")
            return int(heads), int(inits[n.input[1]].dims[0])
    return None


def rank_sensitivity(fused: Path, feeds: Sequence[dict], portable: bool = False) -> list[tuple[str, float]]:
    """Each encoder node quantized alone (rowscaled-int8): the largest probability change it causes on
    ``feeds`` against the fp32 graph, most sensitive first. Model-agnostic: measured, not assumed."""
    import onnx
    import onnxruntime as ort

    def probs(path: Path) -> np.ndarray:
        sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        first = sess.get_outputs()[0].name  # the export's probabilities
        return np.concatenate([sess.run([first], f)[0] for f in feeds])

    reference = probs(fused)
    scores = []
    with tempfile.TemporaryDirectory(prefix="sens-") as tmp:
        for node in transformer_nodes(onnx.load(str(fused))):
            _rowscaled(fused, Path(tmp) / "one.onnx", only=[node], portable=portable)
            diff = np.abs(probs(Path(tmp) / "one.onnx") - reference)
            scores.append((node, float(diff.max()), float(diff.mean())))
    return [(n, s) for n, s, _ in sorted(scores, key=lambda r: (r[1], r[2]), reverse=True)]


def quantize(
    recipe: str,
    fused: Path,
    plain: Path,
    dst: Path,
    keep: Sequence[str] = (),
    portable: bool = False,
    kept_fp32: bool = False,
    calibration: Sequence[dict] = (),
) -> str:
    """Write the int8 graph of ``recipe`` (from the fused or the plain fp32 graph); returns its description.
    ``keep``: the nodes a ``-keepK`` recipe leaves out of int8 (the first K of ``rank_sensitivity``).
    ``portable``: the rowscaled recipes' weights keep 7 bits, so CPUs without VNNI compute the same graph
    (the MatMulNBits recipes are portable as they are: their AVX2 kernels do not saturate). ``kept_fp32``:
    the MatMuls a ``-keepK`` recipe keeps stay fp32 instead of MatMulNBits (KEPT_FP32). ``calibration``:
    the batches (onnx feeds) a smoothed recipe measures its inputs on."""
    check_recipes([recipe])
    spec = RECIPES[recipe]
    rowscaled = spec.family == "rowscaled"
    if rowscaled:
        if spec.smoothed and not calibration:
            raise ValueError(f"{recipe} smooths its MatMul inputs on calibration texts; none were given")
        _rowscaled(
            fused,
            dst,
            keep=list(keep)[: spec.keep],  # fewer when the model has fewer
            portable=portable,
            kept_fp32=kept_fp32,
            attention=spec.attention == "int8",
            smooth_feeds=calibration if spec.smoothed else (),
            alpha=spec.alpha,
        )
    else:
        _nbits_recipe(spec, fused, plain, dst)
    bits = f"; {PORTABLE_WEIGHT_BITS}-bit weights (portable)" if portable and rowscaled else ""
    kept_note = KEPT_FP32 if kept_fp32 and rowscaled and spec.keep else ""
    return f"{recipe}: {spec.description}{kept_note}{bits}"


def _nbits_recipe(spec: Recipe, fused: Path, plain: Path, dst: Path) -> None:
    """The nbits8 recipes: MatMulNBits, then the embedding Gather dynamic int8 (or kept floating point)."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fp32_table = spec.embedding == "float"
    heads = _attention_shape(onnx.load(str(fused))) if spec.fused else None
    with tempfile.TemporaryDirectory(prefix="int8-") as tmp:
        source, staged = plain, Path(tmp) / "matmul_nbits.onnx"
        if heads is not None:  # fused attention; the embedding lookup a Gather unless it stays fp32
            source = Path(tmp) / "fused.onnx"
            fuse_transformer(plain, source, *heads, embedding=fp32_table)
        model = onnx.load(str(source))
        # the fused recipes keep to the encoder's MatMuls; nbits8-b32 takes every MatMul
        _nbits(model, staged, transformer_nodes(model, attention=False) if spec.fused else None)
        if fp32_table:
            shutil.copyfile(staged, dst)
        else:
            quantize_dynamic(
                str(staged), str(dst), weight_type=QuantType.QInt8, op_types_to_quantize=["Gather"]
            )
