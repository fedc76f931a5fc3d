"""int8 graph recipes on hand-built graphs (fast): row scaling, keep recipes, sensitivity, the nbits recipes
and the parity text. tests/test_export_parity.py has the recipe and parity the tiny export keeps."""

from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _graph(path, hidden=16, out=8, seed=0, layers=1):
    """x -> /transformer/.../MatMul (constant weight; ``layers`` of them) -> /MatMul (the head): shaped like
    the export."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [rng.normal(size=(hidden, hidden)).astype(np.float32) for _ in range(layers)]
    w2 = numpy_helper.from_array(rng.normal(size=(hidden, out)).astype(np.float32), "w2")
    inits, nodes, x = [w2], [], "x"
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w, f"w1_{i}"))
        nodes.append(
            helper.make_node("MatMul", [x, f"w1_{i}"], [f"h{i}"], name=f"/transformer/layer.{i}/dense/MatMul")
        )
        x = f"h{i}"
    nodes.append(helper.make_node("MatMul", [x, "w2"], ["y"], name="/MatMul"))
    g = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "t", hidden])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["b", "t", out])],
        inits,
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return model


def _run(path, x):
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


def _activations(seed=1):
    x = np.random.default_rng(seed).normal(size=(3, 5, 16)).astype(np.float32)
    x[:, 0, 3] = 40.0  # a massive activation on the first token, as BERT's [CLS] has
    return x


def test_transformer_nodes_leave_the_head_alone(tmp_path):
    from training.export.recipes import transformer_nodes

    model = _graph(tmp_path / "g.onnx")
    assert transformer_nodes(model) == ["/transformer/layer.0/dense/MatMul"]


def test_row_scaling_is_exact_in_fp32(tmp_path):
    from training.export.recipes import scale_rows, transformer_nodes

    model = _graph(tmp_path / "g.onnx")
    scaled = scale_rows(model, set(transformer_nodes(model)))
    onnx.save(scaled, str(tmp_path / "scaled.onnx"))
    x = _activations()
    np.testing.assert_allclose(
        _run(tmp_path / "scaled.onnx", x), _run(tmp_path / "g.onnx", x), rtol=1e-5, atol=1e-4
    )


def _exact(path, tmp_path):
    """The graph at ``path`` in exact integer arithmetic (as a VNNI CPU runs it), saved beside it."""
    from training.export.integer_reference import integer_reference

    out = tmp_path / f"{Path(path).stem}-exact.onnx"
    onnx.save(integer_reference(onnx.load(str(path))), str(out))
    return out


def test_rowscaled_int8_beats_plain_dynamic_int8_on_an_outlier_token(tmp_path):
    """Compared in exact integer arithmetic: an AVX2-only CPU saturates the 8-bit graphs' products
    (test_portable_rowscaled_int8_computes_the_same_integers_on_every_cpu)."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from training.export.recipes import quantize

    _graph(tmp_path / "g.onnx")
    desc = quantize("rowscaled-int8", tmp_path / "g.onnx", tmp_path / "g.onnx", tmp_path / "q.onnx")
    assert desc.startswith("rowscaled-int8")
    ops = {n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeMatMul"}
    quantize_dynamic(str(tmp_path / "g.onnx"), str(tmp_path / "plain.onnx"), weight_type=QuantType.QInt8)
    x = _activations()
    ref = _run(tmp_path / "g.onnx", x)
    err_rows = np.abs(_run(_exact(tmp_path / "q.onnx", tmp_path), x) - ref)[:, 1:].max()  # no outlier there
    err_plain = np.abs(_run(_exact(tmp_path / "plain.onnx", tmp_path), x) - ref)[:, 1:].max()
    assert err_rows < err_plain / 2


@pytest.mark.parametrize("keep", [False, True])
def test_portable_rowscaled_int8_computes_the_same_integers_on_every_cpu(tmp_path, keep):
    """onnxruntime on this CPU gives what the graph's integer arithmetic gives (``integer_reference``, as
    VNNI computes it). With 8-bit weights an AVX2-only CPU saturates its int16 pair sums: 4.3 off fp32,
    against 0.26 for the exact integers."""
    from onnx import numpy_helper

    from training.export.recipes import PORTABLE_WEIGHT_BITS, quantize

    _graph(tmp_path / "g.onnx", layers=2)
    recipe, kept = (
        ("rowscaled-int8-keep2", ["/transformer/layer.0/dense/MatMul"]) if keep else ("rowscaled-int8", [])
    )
    desc = quantize(
        recipe, tmp_path / "g.onnx", tmp_path / "g.onnx", tmp_path / "q.onnx", keep=kept, portable=True
    )
    assert desc.endswith("7-bit weights (portable)")
    model = onnx.load(str(tmp_path / "q.onnx"))
    weights = [
        numpy_helper.to_array(i) for i in model.graph.initializer if i.data_type == onnx.TensorProto.INT8
    ]
    assert weights and all(np.abs(w.astype(int)).max() <= 2 ** (PORTABLE_WEIGHT_BITS - 1) for w in weights)
    x = _activations()
    exact = _run(_exact(tmp_path / "q.onnx", tmp_path), x)
    np.testing.assert_allclose(
        _run(tmp_path / "q.onnx", x), exact, rtol=1e-5, atol=1e-4 * np.abs(exact).max()
    )
    assert np.abs(exact - _run(tmp_path / "g.onnx", x)).max() > 0  # it is the int8 graph, not the fp32 one


def test_smoothing_is_exact_in_fp32_and_brings_rowscaled_int8_closer_on_an_outlier_channel(tmp_path):
    """A channel ten times the others in every token: row scaling alone leaves the other channels a tenth of
    the 8-bit levels. Smoothed (its range moved into the weight's rows), the fp32 graph computes the same,
    and the int8 graph, in exact integer arithmetic, lands closer to fp32."""
    from training.export.recipes import _rowscaled, transformer_nodes
    from training.export.smoothing import smooth_matmuls

    model = _graph(tmp_path / "g.onnx")
    x = np.random.default_rng(2).normal(size=(3, 5, 16)).astype(np.float32)
    x[:, :, 5] *= 10.0  # an outlier channel, as a transformer's hidden states carry
    names = set(transformer_nodes(model))
    smoothed = smooth_matmuls(model, names, [{"x": x}])
    onnx.save(smoothed, str(tmp_path / "s.onnx"))
    reference = _run(tmp_path / "g.onnx", x)
    np.testing.assert_allclose(_run(tmp_path / "s.onnx", x), reference, rtol=1e-5, atol=1e-4)
    assert "Mul" in {n.op_type for n in smoothed.graph.node}

    def error(graph, smooth_feeds):
        _rowscaled(graph, tmp_path / "q.onnx", smooth_feeds=smooth_feeds)
        return np.abs(_run(_exact(tmp_path / "q.onnx", tmp_path), x) - reference).max()

    assert error(tmp_path / "g.onnx", [{"x": x}]) < 0.7 * error(tmp_path / "g.onnx", ())


@pytest.mark.parametrize(
    ("recipe", "alpha"),
    [
        ("rowscaled-int8-smooth-fp32attn", 0.6),
        ("rowscaled-int8-smooth50-fp32attn", 0.5),
        ("rowscaled-int8-smooth70-fp32attn", 0.7),
    ],
)
def test_each_smoothed_recipe_divides_its_inputs_by_its_own_alpha(tmp_path, recipe, alpha):
    """The smoothed recipes differ in alpha alone: the divisor in front of each MatMul is
    max|x_j| ** alpha / max|W_j| ** (1 - alpha), with max|x_j| measured on the calibration feeds."""
    from onnx import numpy_helper

    from training.export.recipes import RECIPES, quantize

    model = _graph(tmp_path / "g.onnx")
    x = _activations()
    x[:, :, 5] *= 10.0
    assert RECIPES[recipe].alpha == alpha and RECIPES[recipe].smoothed
    desc = quantize(
        recipe, tmp_path / "g.onnx", tmp_path / "g.onnx", tmp_path / "q.onnx", calibration=[{"x": x}]
    )
    assert f"alpha {alpha}" in desc
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(str(tmp_path / "q.onnx")).graph.initializer}
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    node = next(n for n in model.graph.node if n.name == "/transformer/layer.0/dense/MatMul")
    w = np.abs(weights[node.input[1]]).max(axis=1)
    expected = np.abs(x.reshape(-1, x.shape[-1])).max(axis=0) ** alpha / w ** (1 - alpha)
    np.testing.assert_allclose(1.0 / inits[node.name + "_smooth"], expected, rtol=1e-5)


def test_keep_recipes_come_between_the_fast_and_the_faithful_one():
    from training.export.recipes import ALL_RECIPES, DEFAULT_RECIPES, RECIPES, kept_count

    faithful = ("fused-nbits8-b32", "fused-nbits8-b32-fp32emb", "nbits8-b32")
    fast = ("rowscaled-int8", "rowscaled-int8-smooth-fp32attn")
    smoothed = (
        "rowscaled-int8-smooth-fp32attn",
        "rowscaled-int8-smooth50-fp32attn",
        "rowscaled-int8-smooth70-fp32attn",
    )
    assert DEFAULT_RECIPES[:2] == fast and DEFAULT_RECIPES[-3:] == faithful
    assert ALL_RECIPES[:4] == ("rowscaled-int8", *smoothed) and ALL_RECIPES[-3:] == faithful
    counts = [kept_count(r) for r in ALL_RECIPES[4:-3]]
    assert counts == sorted(counts) and counts[0] > 0
    assert set(ALL_RECIPES) == set(RECIPES) and all(kept_count(r) == 0 for r in faithful)


def test_unknown_recipe_is_refused_before_any_work(tmp_path):
    from training.export.exporter import export_model
    from training.export.options import ExportOptions

    with pytest.raises(Exception, match="unknown int8 recipes"):
        export_model(tmp_path, ExportOptions(export_recipes=("int4-magic",)), parity_texts=["x"])


def test_sensitivity_ranks_the_node_reading_an_outlier_channel_first(tmp_path):
    from onnx import numpy_helper

    from training.export.recipes import rank_sensitivity

    model = _graph(tmp_path / "g.onnx", layers=2)
    w0 = next(i for i in model.graph.initializer if i.name == "w1_0")
    silent = numpy_helper.to_array(w0).copy()
    silent[7] = 0.0  # layer.0 ignores the massive channel, so layer.1 reads ordinary activations
    w0.CopyFrom(numpy_helper.from_array(silent, "w1_0"))
    onnx.save(model, str(tmp_path / "g.onnx"))
    feeds = [{"x": _activations(seed)} for seed in (1, 2)]
    for f in feeds:
        f["x"][:, :, 7] = 500.0  # a massive channel in every token: per-token scaling cannot help layer.0
    # portable (7-bit) weights: an AVX2-only CPU would saturate the 8-bit graphs' products and rank noise
    ranking = rank_sensitivity(tmp_path / "g.onnx", feeds, portable=True)
    assert [n for n, _ in ranking] == [
        "/transformer/layer.0/dense/MatMul",
        "/transformer/layer.1/dense/MatMul",
    ]


@pytest.mark.parametrize("kept_fp32", [False, True])
def test_keep_recipe_leaves_the_kept_node_in_matmul_nbits_or_fp32(tmp_path, kept_fp32):
    from training.export.recipes import KEPT_FP32, quantize

    _graph(tmp_path / "g.onnx", layers=2)
    kept = "/transformer/layer.0/dense/MatMul"
    desc = quantize(
        "rowscaled-int8-keep2",
        tmp_path / "g.onnx",
        tmp_path / "g.onnx",
        tmp_path / "q.onnx",
        keep=[kept],
        kept_fp32=kept_fp32,
    )
    assert desc.endswith(KEPT_FP32) == kept_fp32
    nodes = onnx.load(str(tmp_path / "q.onnx")).graph.node
    ops = {n.op_type for n in nodes}
    assert ("MatMulNBits" in ops) != kept_fp32 and ops & {"MatMulInteger", "DynamicQuantizeMatMul"}
    assert [n.op_type for n in nodes if n.name.startswith(kept.removesuffix("/MatMul"))] == (
        ["MatMul"] if kept_fp32 else ["MatMulNBits"]
    )
    assert [n.op_type for n in nodes if n.name.startswith("/MatMul")] == ["MatMul"]  # the head stays fp32
    x = _activations()
    ref = _run(tmp_path / "g.onnx", x)
    err = np.abs(_run(_exact(tmp_path / "q.onnx", tmp_path), x) - ref).max()
    assert err < 0.05 * np.abs(ref).max()
    if kept_fp32:  # the kept node exact: closer to fp32 than the graph that keeps it in MatMulNBits
        quantize(
            "rowscaled-int8-keep2", tmp_path / "g.onnx", tmp_path / "g.onnx", tmp_path / "n.onnx", keep=[kept]
        )
        assert err < np.abs(_run(_exact(tmp_path / "n.onnx", tmp_path), x) - ref).max()


@pytest.mark.parametrize("recipe", ["fused-nbits8-b32", "nbits8-b32"])
def test_nbits_recipes_quantize_the_encoder_and_only_nbits8_the_head(tmp_path, recipe):
    """fused-nbits8-b32 keeps to the encoder's MatMuls; nbits8-b32 takes every MatMul."""
    from training.export.recipes import quantize

    _graph(tmp_path / "g.onnx", layers=2)
    quantize(recipe, tmp_path / "g.onnx", tmp_path / "g.onnx", tmp_path / "q.onnx")
    ops = {n.name: n.op_type for n in onnx.load(str(tmp_path / "q.onnx")).graph.node}
    encoder = [op for name, op in ops.items() if name.startswith("/transformer/")]
    head = [op for name, op in ops.items() if name.startswith("/MatMul")]
    assert encoder == ["MatMulNBits", "MatMulNBits"]
    assert head == (["MatMul"] if recipe == "fused-nbits8-b32" else ["MatMulNBits"])


def test_parity_text_keeps_splits_and_labels_of_labelled_files(tmp_path):
    import json

    from training.export.parity import load_parity_text

    (tmp_path / "test.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in [("a", "SEARCH"), ("b", "MEMORY")])
    )
    (tmp_path / "oos.jsonl").write_text(json.dumps({"text": "c"}) + "\n")
    text = load_parity_text([tmp_path / "test.jsonl", tmp_path / "oos.jsonl"], ["MEMORY", "SEARCH"])
    assert text.texts == ["a", "b", "c"]
    assert text.splits == {"test": slice(0, 2), "oos": slice(2, 3)}
    assert list(text.labels) == ["test"] and text.labels["test"].tolist() == [1, 0]


def test_unknown_recipe(tmp_path):
    from training.export.recipes import quantize

    with pytest.raises(ValueError, match="unknown int8 recipe"):
        quantize("int3", tmp_path / "a", tmp_path / "b", tmp_path / "c")
