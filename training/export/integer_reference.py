"""The integer arithmetic an int8 graph stands for, in floating point: the reference that onnxruntime's int8
kernels are checked against (tests/test_quantize_recipes_and_parity.py), whatever CPU runs the check."""

from __future__ import annotations

import numpy as np


def integer_reference(model):
    """``model`` with every MatMulInteger computed in float64 and every QAttention as an fp32 Attention on
    its dequantized input and weights: the exact integer arithmetic the int8 graph stands for, as a CPU with
    VNNI computes it. onnxruntime on an AVX2-only CPU gives the same outputs for portable graphs only."""
    from onnx import TensorProto, helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    out = []
    for n in model.graph.node:
        p = n.name
        if n.op_type == "MatMulInteger":
            a, b, a_zero, b_zero = n.input
            for src, zero, side in ((a, a_zero, "a"), (b, b_zero, "b")):
                out += [
                    helper.make_node("Cast", [src], [f"{p}_{side}f"], to=TensorProto.DOUBLE),
                    helper.make_node("Cast", [zero], [f"{p}_{side}z"], to=TensorProto.DOUBLE),
                    helper.make_node("Sub", [f"{p}_{side}f", f"{p}_{side}z"], [f"{p}_{side}0"]),
                ]
            out += [
                helper.make_node("MatMul", [f"{p}_a0", f"{p}_b0"], [f"{p}_y"]),
                helper.make_node("Cast", [f"{p}_y"], [n.output[0]], to=TensorProto.INT32),
            ]
        elif n.op_type == "QAttention":
            x, w, bias, x_scale, w_scale, mask, x_zero, w_zero = (list(n.input) + [""] * 8)[:8]
            weight = numpy_helper.to_array(inits[w]).astype(np.float64)
            if w_zero:
                weight -= numpy_helper.to_array(inits[w_zero]).astype(np.float64)
            weight *= numpy_helper.to_array(inits[w_scale]).astype(np.float64)
            model.graph.initializer.append(numpy_helper.from_array(weight.astype(np.float32), p + "_w"))
            attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
            out += [
                helper.make_node("DequantizeLinear", [x, x_scale, x_zero], [p + "_x"]),
                helper.make_node(
                    "Attention",
                    [p + "_x", p + "_w", bias, mask],
                    list(n.output),
                    domain="com.microsoft",
                    **attrs,
                ),
            ]
        else:
            out.append(n)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return model
