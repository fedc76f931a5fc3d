"""A graph whose weights are stored in half precision and computed in full: half the file, fp32 compute.

``store_half`` rewrites every large float32 initializer of a graph as float16 followed by a Cast back to
float32 under the weight's old name, so no other node changes. onnxruntime folds those casts into float32
constants when it opens the session, so the graph runs the fp32 kernels at the fp32 graph's speed; the only
difference from the fp32 graph is each weight rounded to the nearest float16 (a relative error of at most
2^-11). The export keeps such a graph as the ``fp16`` variant when no int8 recipe passes parity: it is
checked against PyTorch like the others (training.export.parity).

``full_precision`` undoes the rewrite in memory (each cast weight becomes its float32 value again under its
old name), so code that reads weights out of a graph (training.export.graph_weights) reads either form.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

# smaller tensors (LayerNorm scales, biases, the heads) stay float32: they are a few KB in all, and the
# heads' weights keep the precision they were calibrated in
MIN_ELEMENTS = 4096
HALF_SUFFIX = "__fp16"
_STORED = f"weights of {MIN_ELEMENTS} elements or more stored as float16 and cast at load"
HALF_DESCRIPTION = f"the fp32 graph, its {_STORED}"
HALF_INT8 = f"; its fp32 {_STORED}"
CAST_PREFIX = "cast_to_fp32/"


def store_half(src: str | Path, dst: str | Path, min_elements: int = MIN_ELEMENTS) -> dict:
    """Write ``src``'s graph to ``dst`` with every float32 initializer of at least ``min_elements``
    elements stored as float16 and cast back at load; returns how many tensors and bytes were halved.

    Refuses a value that float16 cannot hold (beyond +-65504): it would come back as infinity."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    model = onnx.load(str(src))
    graph = model.graph
    casts, kept, halved_bytes = [], [], 0
    for init in graph.initializer:
        size = int(np.prod(init.dims)) if init.dims else 1
        if init.data_type != TensorProto.FLOAT or size < min_elements:
            kept.append(init)
            continue
        value = numpy_helper.to_array(init)
        if not np.isfinite(value).all() or np.abs(value).max() > np.finfo(np.float16).max:
            raise ValueError(f"{init.name}: values beyond float16's range cannot be stored in half precision")
        half = numpy_helper.from_array(value.astype(np.float16), init.name + HALF_SUFFIX)
        kept.append(half)
        casts.append(
            helper.make_node(
                "Cast", [half.name], [init.name], name=CAST_PREFIX + init.name, to=TensorProto.FLOAT
            )
        )
        halved_bytes += value.nbytes // 2
    del graph.initializer[:]
    graph.initializer.extend(kept)
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(casts + nodes)  # the casts read initializers only: first keeps the order topological
    onnx.save(model, str(dst))
    return {"tensors": len(casts), "bytes_saved": halved_bytes}


def half_casts(model) -> list:
    """The Cast nodes by which ``store_half`` feeds each weight it halved to the graph (an
    ``onnx.ModelProto``): one per weight stored in half precision."""
    from onnx import TensorProto

    inits = {i.name: i for i in model.graph.initializer}
    return [
        n
        for n in model.graph.node
        if n.op_type == "Cast"
        and n.input[0] in inits
        and inits[n.input[0]].data_type == TensorProto.FLOAT16
        and n.input[0].endswith(HALF_SUFFIX)
    ]


def full_precision(model):
    """``model`` (an ``onnx.ModelProto``) with every weight ``store_half`` halved back as a float32
    initializer under its old name and the casts removed; a graph without them is returned as it is."""
    from onnx import numpy_helper

    casts = half_casts(model)
    if not casts:
        return model
    inits = {i.name: i for i in model.graph.initializer}
    for node in casts:
        value = numpy_helper.to_array(inits.pop(node.input[0])).astype(np.float32)
        inits[node.output[0]] = numpy_helper.from_array(value, node.output[0])
        model.graph.node.remove(node)
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits.values())
    return model
