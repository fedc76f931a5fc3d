"""Weights stored in half precision, computed in full (training.export.half_storage)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph(path, weight: np.ndarray, bias: np.ndarray) -> None:
    """y = x @ W + b, with W and b initializers."""
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", weight.shape[0]])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", weight.shape[1]])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(bias, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what onnxruntime reads, whatever the onnx package writes by default
    onnx.save(model, str(path))


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def test_large_weights_are_stored_as_float16_and_computed_as_their_rounded_values(tmp_path):
    from training.export.half_storage import store_half

    rng = np.random.default_rng(0)
    weight = rng.normal(size=(128, 64)).astype(np.float32)  # 8192 elements: halved
    bias = rng.normal(size=64).astype(np.float32)  # 64: kept in float32
    x = rng.normal(size=(5, 128)).astype(np.float32)
    _graph(tmp_path / "full.onnx", weight, bias)
    done = store_half(tmp_path / "full.onnx", tmp_path / "half.onnx")
    assert done == {"tensors": 1, "bytes_saved": weight.nbytes // 2}
    assert (tmp_path / "half.onnx").stat().st_size < 0.6 * (tmp_path / "full.onnx").stat().st_size
    inits = {i.name: i.data_type for i in onnx.load(str(tmp_path / "half.onnx")).graph.initializer}
    assert inits == {"W__fp16": onnx.TensorProto.FLOAT16, "b": onnx.TensorProto.FLOAT}
    rounded = weight.astype(np.float16).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "half.onnx", x), x @ rounded + bias, rtol=1e-5, atol=1e-5)
    full = _run(tmp_path / "full.onnx", x)
    assert 0 < np.abs(_run(tmp_path / "half.onnx", x) - full).max() < 1e-2 * np.abs(full).max()


def test_full_precision_gives_the_weights_back_under_their_names(tmp_path):
    from onnx import numpy_helper

    from training.export.half_storage import full_precision, store_half

    weight = np.linspace(-3, 3, 128 * 64, dtype=np.float32).reshape(128, 64)
    _graph(tmp_path / "full.onnx", weight, np.zeros(64, np.float32))
    store_half(tmp_path / "full.onnx", tmp_path / "half.onnx")
    back = full_precision(onnx.load(str(tmp_path / "half.onnx")))
    assert [n.op_type for n in back.graph.node] == ["MatMul", "Add"]
    inits = {i.name: numpy_helper.to_array(i) for i in back.graph.initializer}
    assert inits["W"].dtype == np.float32
    np.testing.assert_array_equal(inits["W"], weight.astype(np.float16).astype(np.float32))
    plain = onnx.load(str(tmp_path / "full.onnx"))
    assert full_precision(plain) is plain  # a graph stored in full precision is left as it is


def test_a_weight_beyond_float16s_range_is_refused(tmp_path):
    from training.export.half_storage import store_half

    weight = np.full((128, 64), 1e5, dtype=np.float32)
    _graph(tmp_path / "full.onnx", weight, np.zeros(64, np.float32))
    with pytest.raises(ValueError, match="float16's range"):
        store_half(tmp_path / "full.onnx", tmp_path / "half.onnx")
