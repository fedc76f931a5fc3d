"""Per-channel smoothing of an encoder MatMul's input before int8 (SmoothQuant, Xiao et al. 2022).

A transformer's hidden states carry a few channels far larger than the rest. Row scaling
(training.export.recipes.scale_rows) divides each token by its largest value, so in a token where one
channel is ten times the others, those others keep about a tenth of the 8-bit levels. Smoothing divides
channel j of the input by s_j and multiplies row j of the weight by s_j, which leaves the product exact in
fp32 and moves part of the range from the activations to the weights (quantized per output channel):

    s_j = max|x_j| ** alpha / max|W_j| ** (1 - alpha)

with max|x_j| measured over the non-padding tokens of calibration texts. The division is one element-wise
Mul before the MatMul. ``fixed_range_inputs`` then quantizes each row-scaled input over [-1, 1], so a
message's integers do not depend on its batch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# a little more of each channel's range moved into the weights than the paper's 0.5: of two default-model
# training runs, 0.6 passed parity with margin on both, 0.5 on one (one oos.jsonl message flipped on the
# other), 0.7 on neither; a third passed at 0.7 alone. The recipes at 0.5 and 0.7 come next
# (training.export.recipes, docs/speed.md)
SMOOTHING_ALPHA = 0.6
ROW_SCALED = "_xn"  # the suffix of a MatMul input divided by its rows' maxima (recipes.scale_rows)


def channel_maxima(graph, inputs: Sequence[str], feeds: Sequence[dict]) -> dict[str, np.ndarray]:
    """Each named tensor of ``graph`` (an ``onnx.ModelProto``, left as it is) as its largest absolute value
    per channel (its last axis) over the tokens of ``feeds`` (the graph's input batches; with an
    attention_mask, its non-padding tokens)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    model = onnx.ModelProto()
    model.CopyFrom(graph)
    del model.graph.output[:]
    model.graph.output.extend(helper.make_tensor_value_info(x, TensorProto.FLOAT, None) for x in inputs)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    maxima: dict[str, np.ndarray] = {}
    for feed in feeds:
        mask = feed.get("attention_mask")
        for name, value in zip(inputs, session.run(list(inputs), feed), strict=True):
            rows = value[mask.astype(bool)] if mask is not None else value.reshape(-1, value.shape[-1])
            top = np.abs(rows).max(axis=0)
            maxima[name] = np.maximum(maxima[name], top) if name in maxima else top
    return maxima


def smooth_matmuls(model, names: set[str], feeds: Sequence[dict], alpha: float = SMOOTHING_ALPHA):
    """``model`` (an ``onnx.ModelProto``) with each named MatMul's input smoothed per channel (module
    docstring), its maxima measured on ``feeds``; exact in fp32. Returns the model."""
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    matmuls = [n for n in model.graph.node if n.name in names]
    maxima = channel_maxima(model, sorted({n.input[0] for n in matmuls}), feeds)
    out = []
    for n in model.graph.node:
        if n.name in names:
            weight = numpy_helper.to_array(inits[n.input[1]])
            scale = maxima[n.input[0]] ** alpha / np.maximum(np.abs(weight).max(axis=1), 1e-8) ** (1 - alpha)
            scale = np.clip(scale, 1e-5, None).astype(np.float32)
            inits[n.input[1]].CopyFrom(numpy_helper.from_array(weight * scale[:, None], n.input[1]))
            divisor, smoothed = n.name + "_smooth", n.name + "_xs"
            model.graph.initializer.append(numpy_helper.from_array((1.0 / scale).astype(np.float32), divisor))
            out.append(helper.make_node("Mul", [n.input[0], divisor], [smoothed], name=smoothed))
            n.input[0] = smoothed
        out.append(n)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return model


def fixed_range_inputs(model):
    """``model`` (a rowscaled graph after dynamic quantization) with each row-scaled MatMul input quantized
    over the fixed range [-1, 1] instead of its tensor's own minimum and maximum. Divided by its row's
    largest absolute value, every row lies in that range, so the integers a message gets no longer depend
    on the other messages of its batch (nor on its own range, which a batch widens anyway). Returns the
    model."""
    from onnx import helper, numpy_helper

    out = []
    for n in model.graph.node:
        if n.op_type == "DynamicQuantizeLinear" and n.input[0].endswith(ROW_SCALED):
            y, scale, zero = n.output
            model.graph.initializer.extend(
                [
                    numpy_helper.from_array(np.array(2.0 / 255.0, np.float32), scale),
                    numpy_helper.from_array(np.array(128, np.uint8), zero),
                ]
            )
            n = helper.make_node("QuantizeLinear", [n.input[0], scale, zero], [y], name=n.name + "_fixed")
        out.append(n)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return model
