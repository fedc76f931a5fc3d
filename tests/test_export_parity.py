"""The recipe and parity the tiny export keeps (most tests train it: slow): a recipe that passes parity
single and batched, a keep recipe and its per-split parity, the fp32-attention recipe, the margin shortfalls, a graph that disagrees
failing the gate, the faithful graph as the default when no int8 recipe passes, and the export's silenced
chatter."""

import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


@pytest.mark.slow
def test_tiny_export_keeps_a_recipe_that_passes_parity_single_and_batched(tiny_exported):
    from training.export.parity import MAX_PROB_DIFF
    from training.export.recipes import DEFAULT_RECIPES

    _, manifest = tiny_exported
    int8 = manifest.export.variants["int8"]
    assert int8.recipe in DEFAULT_RECIPES
    p = int8.parity
    assert p.passed and p.top1_agreement >= 0.995 and p.batched_top1_agreement >= 0.995
    assert p.max_abs_prob_diff <= MAX_PROB_DIFF and p.batched_max_abs_prob_diff <= MAX_PROB_DIFF
    assert p.max_abs_prob_diff_allowed == MAX_PROB_DIFF
    assert manifest.export.variants["fp32"].parity.batched_top1_agreement == 1.0


@pytest.mark.slow
def test_tiny_export_with_a_keep_recipe_records_the_kept_nodes_and_per_split_parity(
    tiny_trained, tmp_path, monkeypatch
):
    import shutil

    from training.export import parity
    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.export.recipes import KEPT_FP32

    # The tiny model (a handful of steps) has messages near its distance threshold, so one of its 19
    # parity texts may flip its in-scope flag under int8; this test checks what the manifest records,
    # not the gate (test_parity_gate_fails_a_graph_that_disagrees does), so the int8 floor is lowered here.
    monkeypatch.setitem(parity.PARITY_MIN, "int8", 0.9)

    src, _ = tiny_trained
    out = tmp_path / "model"
    shutil.copytree(src, out)
    tiny = Path(__file__).parent / "fixtures" / "tiny"
    files = [tiny / "test.jsonl", tiny / "oos.jsonl"]
    options = ExportOptions(variants=("int8",), export_recipes=("rowscaled-int8-keep2",), int8_kept_fp32=True)
    manifest = export_model(out, options, parity_file=files, report=lambda _: None)
    int8 = manifest.export.variants["int8"]
    assert int8.recipe == "rowscaled-int8-keep2" and len(int8.kept_nodes) == 2
    assert int8.quantization.endswith(KEPT_FP32)
    assert "MatMulNBits" not in {n.op_type for n in onnx.load(str(out / "model.int8.onnx")).graph.node}
    assert int8.calibration_texts and not (out / "model.fp32.onnx").exists()
    p = int8.parity
    assert set(p.split_top1_agreement) == set(p.batched_split_top1_agreement) == {"test", "oos"}
    assert set(p.quality) == {"test"} and {"accuracy", "ece", "reference_accuracy"} <= set(p.quality["test"])


@pytest.mark.slow
def test_the_fp32_attention_recipe_quantizes_the_matmuls_and_leaves_every_attention_fp32(
    tiny_trained, tmp_path, monkeypatch
):
    import shutil

    from training.export import parity
    from training.export.exporter import export_model
    from training.export.options import ExportOptions

    monkeypatch.setitem(parity.PARITY_MIN, "int8", 0.9)  # what the graph holds is checked here, not the gate
    src, _ = tiny_trained
    out = tmp_path / "model"
    shutil.copytree(src, out)
    tiny = Path(__file__).parent / "fixtures" / "tiny"
    options = ExportOptions(variants=("int8",), export_recipes=("rowscaled-int8-smooth-fp32attn",))
    manifest = export_model(out, options, parity_file=[tiny / "test.jsonl"], report=lambda _: None)
    assert manifest.export.variants["int8"].recipe == "rowscaled-int8-smooth-fp32attn"
    ops = [n.op_type for n in onnx.load(str(out / "model.int8.onnx")).graph.node]
    assert "Attention" in ops and "QAttention" not in ops
    # the attention output, intermediate and output MatMuls of every layer, each row scaled
    assert ops.count("MatMulInteger") == 3 * ops.count("Attention")
    assert "DynamicQuantizeLinear" not in ops  # row-scaled inputs quantized over a fixed range
    # so a message gets the same probabilities alone and among others of other lengths
    texts = [json.loads(line)["text"] for line in (tiny / "test.jsonl").open()]
    session = ort.InferenceSession(str(out / "model.int8.onnx"), providers=["CPUExecutionProvider"])
    tokenizer = Tokenizer.from_file(str(out / "tokenizer.json"))
    tokenizer.enable_padding()
    feeds = [tokenizer.encode_batch(texts[k : k + 1]) for k in range(len(texts))] + [
        tokenizer.encode_batch(texts)
    ]

    def run(batch):
        ids = np.array([e.ids for e in batch], dtype=np.int64)
        mask = np.array([e.attention_mask for e in batch], dtype=np.int64)
        return session.run(["probabilities"], {"input_ids": ids, "attention_mask": mask})[0]

    alone = np.concatenate([run(f) for f in feeds[:-1]])
    np.testing.assert_allclose(run(feeds[-1]), alone, atol=1e-5)


def test_margin_shortfalls_name_what_is_close_to_the_gates():
    from router.manifest import Parity
    from training.export.parity import margin_shortfalls

    p = Parity(
        n=100,
        top1_agreement=0.998,
        max_abs_prob_diff=0.05,
        in_scope_agreement=0.999,
        min_required=0.995,
        passed=True,
        batched_top1_agreement=0.996,
        batched_max_abs_prob_diff=0.13,
        batched_in_scope_agreement=None,
    )
    assert margin_shortfalls(p) == [
        "batched top-1 agreement 0.9960 (margin >= 0.997)",
        "batched max |dp| 0.1300 (margin <= 0.12)",
    ]
    assert (
        margin_shortfalls(
            p.model_copy(update={"batched_top1_agreement": 1.0, "batched_max_abs_prob_diff": 0.1})
        )
        == []
    )


@pytest.mark.slow
def test_parity_gate_fails_a_graph_that_disagrees(tiny_exported):
    from eval.readers.loader import load_labeled
    from router.classifier import Classifier
    from router.manifest import load_manifest
    from training.export.parity import check_parity

    model_dir, _ = tiny_exported
    manifest = load_manifest(model_dir)
    texts = load_labeled(Path(__file__).parent / "fixtures" / "tiny" / "test.jsonl").texts
    clf = Classifier(model_dir, variant="int8", manifest=manifest, require_parity=False)
    probs, dist, scores, intents, _ = clf.predict_compound(texts)
    ref = (probs, dist, scores, intents)
    assert check_parity(None, model_dir, manifest, texts, lambda _: None, ["int8"], ref=ref) == []
    moved = np.roll(probs, 1, axis=1)  # the reference's top-1 is another label for every message
    ref = (moved, dist, scores, intents)
    failures = check_parity(None, model_dir, manifest, texts, lambda _: None, ["int8"], ref=ref)
    assert len(failures) == 1 and "top-1 agreement" in failures[0] and "max |dp|" in failures[0]
    assert manifest.export.variants["int8"].parity.passed is False
    other = [["ACTION", "SEARCH"] if i != ["ACTION", "SEARCH"] else ["ACTION"] for i in intents]
    ref = (probs, dist, scores, other)  # the reference finds other intents for every message
    failures = check_parity(None, model_dir, manifest, texts, lambda _: None, ["int8"], ref=ref)
    assert len(failures) == 1 and "intents agreement 0.0000" in failures[0]


def test_when_no_int8_recipe_passes_a_faithful_graph_becomes_the_default(tiny_trained, tmp_path, monkeypatch):
    """A build whose int8 graphs all miss parity ends with a faithful graph as its default variant: the fp16
    graph (fp32 compute, weights stored in half precision) when it passes its own parity check, else the
    exact fp32 graph; the failed graphs stay, refused by the router; --require-int8 makes the miss an
    error instead."""
    import shutil

    from eval.bench.speed import run_speed_benchmark
    from router import Router
    from router.classifier import Classifier
    from router.manifest import ModelError
    from training.export import parity
    from training.export.exporter import export_model
    from training.export.options import ExportOptions

    monkeypatch.setitem(parity.PARITY_MIN, "int8", 1.01)  # no int8 graph can agree on more than every text
    src, _ = tiny_trained
    tiny = Path(__file__).parent / "fixtures" / "tiny"
    out = tmp_path / "model"
    shutil.copytree(src, out)
    options = ExportOptions(keep_fp32=False, export_recipes=("rowscaled-int8",), portable_int8=True)
    manifest = export_model(out, options, parity_file=tiny / "test.jsonl", report=lambda _: None)
    variants = manifest.export.variants
    assert variants["int8"].quantization.endswith("7-bit weights (portable)")
    assert manifest.export.default_variant == "fp16" and variants["fp16"].parity.passed
    assert not (out / "model.fp32.onnx").exists() and "fp32" not in variants  # --drop-fp32: fp16 serves
    assert not variants["int8"].parity.passed and variants["int8"].parity.cpu  # the CPU parity ran on
    router = Router.load(out)
    assert router.route("find the Q3 deck", "admin").model_id.endswith("/fp16")
    with pytest.raises(ModelError, match="failed its parity check"):
        Classifier(out, variant="int8")
    said = []
    bench = run_speed_benchmark(out, ["find the Q3 deck", "book a room"], runs=1, report=said.append)
    assert [r["name"] for r in bench["rows"]] == ["router onnx fp16"]  # the failed int8 graph is not timed
    assert "skipping onnx int8: it failed its parity check at export" in said

    monkeypatch.setitem(parity.PARITY_MIN, "fp16", 1.01)  # and when the fp16 graph misses too: fp32
    exact = tmp_path / "exact"
    shutil.copytree(src, exact)
    options = ExportOptions(export_recipes=("rowscaled-int8",))
    manifest = export_model(exact, options, parity_file=tiny / "test.jsonl", report=lambda _: None)
    assert manifest.export.default_variant == "fp32" and manifest.export.variants["fp32"].parity.passed
    assert not manifest.export.variants["fp16"].parity.passed
    assert (exact / "model.fp16.onnx").stat().st_size < 0.6 * (exact / "model.fp32.onnx").stat().st_size
    assert Router.load(exact).route("find the Q3 deck", "admin").model_id.endswith("/fp32")

    again = tmp_path / "again"
    shutil.copytree(src, again)
    with pytest.raises(parity.ParityError, match="int8"):
        options = ExportOptions(export_recipes=("rowscaled-int8",), require_int8=True)
        export_model(again, options, parity_file=tiny / "test.jsonl", report=lambda _: None)


@pytest.mark.parametrize("prefer_margin", [True, False])
def test_when_no_recipe_passes_with_margin_the_first_that_passes_is_put_back_not_rebuilt(
    tiny_trained, tmp_path, monkeypatch, prefer_margin
):
    """Every recipe passes the gates but none with margin: the first one's graph, set aside when it was
    checked, comes back with its entry (the sha256 the router checks), and nothing is quantized again.
    Without ``int8_prefer_margin`` the first recipe that passes is kept at once, and no other is tried."""
    import shutil

    from router import Router
    from router.manifest import load_manifest
    from training.export import int8_search
    from training.export.exporter import export_model
    from training.export.options import ExportOptions

    monkeypatch.setattr(int8_search, "margin_shortfalls", lambda parity: ["top-1 agreement (margin)"])
    built = []
    build = int8_search.Int8Builder.build
    monkeypatch.setattr(int8_search.Int8Builder, "build", lambda self, r: built.append(r) or build(self, r))
    src, _ = tiny_trained
    out = tmp_path / "model"
    shutil.copytree(src, out)
    recipes = ("nbits8-b32", "rowscaled-int8")
    options = ExportOptions(export_recipes=recipes, portable_int8=True, int8_prefer_margin=prefer_margin)
    tiny = Path(__file__).parent / "fixtures" / "tiny"
    export_model(out, options, parity_file=tiny / "test.jsonl", report=lambda _: None)
    # the first recipe is not quantized a second time; without the margin preference, the second not at all
    assert built == list(recipes if prefer_margin else recipes[:1])
    int8 = load_manifest(out).export.variants["int8"]
    assert int8.recipe == "nbits8-b32" and int8.parity.passed
    assert [r.split(")")[0] for r in int8.rejected] == (["int8 (rowscaled-int8"] if prefer_margin else [])
    assert sorted(p.name for p in out.iterdir() if p.name.endswith(".aside")) == []
    assert Router.load(out).route("find the Q3 deck", "admin").model_id.endswith("/int8")


def test_the_exports_known_chatter_is_silenced_and_nothing_else(caplog):
    """Build output: torch's legacy-exporter notice and onnxruntime's pre-processing hint are dropped; other
    warnings and log lines still show."""
    import logging
    import warnings

    from training.export.torch_graph import known_export_noise_silenced

    with caplog.at_level(logging.WARNING), warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with known_export_noise_silenced():
            warnings.warn(
                "You are using the legacy TorchScript-based ONNX export", DeprecationWarning, stacklevel=1
            )
            logging.warning("Please consider to run pre-processing before quantization.")
            warnings.warn("a real problem", RuntimeWarning, stacklevel=1)
            warnings.warn("another library's deprecation", DeprecationWarning, stacklevel=1)
            logging.warning("parity failed")
    assert [str(w.message) for w in seen] == ["a real problem", "another library's deprecation"]
    assert [r.getMessage() for r in caplog.records] == ["parity failed"]
