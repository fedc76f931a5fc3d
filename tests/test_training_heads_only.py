"""Which rows train what (training.fit.train, real SetFit runs on the tiny fixture corpus): ``heads_only_file``
rows (one file or several) train the heads and not the contrastive phase; ``more_train_files`` rows train both, as the train
file's do."""

from __future__ import annotations

import json

import pytest

import training.fit.phases as fit_phases
from tests.conftest import tiny_config

EVERYDAY = [
    ("can you turn the porch light off", "ACTION"),
    ("text my sister that i'm running late", "ACTION"),
    ("find the warranty card for the dishwasher", "SEARCH"),
    ("why does my phone battery drain so fast overnight", "REASONING"),
    ("plan a cheap weekend in lisbon for two", "PLANNING"),
    ("what did i tell you about my dentist appointment", "MEMORY"),
    ("do you like music?", "OUT_OF_SCOPE"),
]


def _everyday_file(tmp_path, rows=EVERYDAY, name="train_everyday.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    return path


def _record_contrastive_rows(monkeypatch) -> list[list[str]]:
    """The texts each contrastive phase receives, as the phase is run."""
    seen: list[list[str]] = []
    contrastive_rows = fit_phases.contrastive_rows

    def recording(ds, oos_rows, seed):
        seen.append(list(ds["text"]))
        return contrastive_rows(ds, oos_rows, seed)

    monkeypatch.setattr(fit_phases, "contrastive_rows", recording)
    return seen


@pytest.mark.slow
def test_heads_only_rows_reach_the_heads_and_not_the_contrastive_phase(tmp_path, monkeypatch):
    from training.fit.train import train

    everyday, seen = _everyday_file(tmp_path), _record_contrastive_rows(monkeypatch)
    config = tiny_config(heads_only_file=everyday, max_steps=10)
    manifest = train(config, tmp_path / "model", report=lambda _: None, show_progress=False)

    (body_texts,) = seen
    train_texts = [json.loads(line)["text"] for line in config.train_file.read_text().splitlines()]
    assert body_texts == train_texts  # the train file's rows, in order, and nothing else
    data = manifest.training["data"]
    assert data["rows"]["heads_only"] == len(EVERYDAY) and str(everyday) in data["files"]
    assert data["label_counts"]["ACTION"] == 8 + 2  # the head's prior counts every row it learned from
    assert "heads_only_file" not in manifest.training["hyperparameters"]


@pytest.mark.parametrize("option", ["heads_only_file", "more_train_files"])
def test_rows_outside_the_train_file_must_use_its_labels(tmp_path, option):
    from eval.readers.sources import DataError
    from training.fit.train import train

    odd = tmp_path / "train_garden.jsonl"
    odd.write_text(json.dumps({"text": "water the plants at six", "label": "GARDENING"}) + "\n")
    config = tiny_config(**{option: odd if option == "heads_only_file" else [odd]})
    with pytest.raises((DataError, ValueError), match="GARDENING"):
        train(config, tmp_path / "model", report=lambda _: None, show_progress=False)


@pytest.mark.slow
def test_heads_only_weight_repeats_the_rows_in_the_softmax_head(tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    from training.fit.intent_model import IntentModel
    from training.fit.train import train

    # two files, read in the order given
    everyday = [_everyday_file(tmp_path, EVERYDAY[4:], "b.jsonl"), _everyday_file(tmp_path, EVERYDAY[:4])]
    seen: list[list[str]] = []
    encoded: list[str] = []
    fit_softmax_head, encode = IntentModel.fit_softmax_head, SentenceTransformer.encode

    def recording(self, texts, labels):
        seen.append(list(texts))
        return fit_softmax_head(self, texts, labels)

    def counting(self, sentences, *args, **kwargs):
        encoded.extend([sentences] if isinstance(sentences, str) else sentences)
        return encode(self, sentences, *args, **kwargs)

    monkeypatch.setattr(IntentModel, "fit_softmax_head", recording)
    monkeypatch.setattr(SentenceTransformer, "encode", counting)
    config = tiny_config(heads_only_file=everyday, heads_only_weight=3, max_steps=10)
    manifest = train(config, tmp_path / "model", report=lambda _: None, show_progress=False)

    # a row counted three times is encoded once, for every head fitted on the trained body
    assert [encoded.count(t) for t, _ in EVERYDAY] == [1] * len(EVERYDAY)
    (head_texts,) = seen
    train_texts = [json.loads(line)["text"] for line in config.train_file.read_text().splitlines()]
    assert head_texts[: len(train_texts)] == train_texts  # the train file's rows once each
    assert head_texts[len(train_texts) :] == [t for t, _ in EVERYDAY[4:] + EVERYDAY[:4] for _ in range(3)]
    data = manifest.training["data"]
    assert data["label_counts"]["ACTION"] == 8 + 2 * 3  # the prior the head learned
    assert data["rows"]["heads_only"] == len(EVERYDAY) and all(str(p) in data["files"] for p in everyday)
    assert manifest.training["hyperparameters"]["heads_only_weight"] == 3


@pytest.mark.slow
def test_more_train_files_rows_reach_the_contrastive_phase_after_the_train_files(tmp_path, monkeypatch):
    from training.fit.train import train

    everyday, seen = _everyday_file(tmp_path), _record_contrastive_rows(monkeypatch)
    config = tiny_config(more_train_files=[everyday], max_steps=10)
    manifest = train(config, tmp_path / "model", report=lambda _: None, show_progress=False)

    (body_texts,) = seen
    train_texts = [json.loads(line)["text"] for line in config.train_file.read_text().splitlines()]
    assert body_texts == train_texts + [t for t, _ in EVERYDAY]
    data = manifest.training["data"]
    assert data["rows"]["train"] == len(train_texts) + len(EVERYDAY) and str(everyday) in data["files"]
    assert data["label_counts"]["ACTION"] == 8 + 2
    assert "more_train_files" not in manifest.training["hyperparameters"]


def test_more_compound_train_files_rows_join_the_compound_head_rows(tmp_path):
    from training.fit.train import _read_corpus

    pairs = tmp_path / "train_everyday_pairs.jsonl"
    rows = [
        {"text": "check if my train is late and text mum", "labels": ["ACTION", "SEARCH"], "pair": "E-1"},
        {"text": "is my train late", "label": "SEARCH", "twin": True, "pair": "E-1"},
    ]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = _read_corpus(tiny_config(), report=lambda _: None)
    more = _read_corpus(tiny_config(more_compound_train_files=[pairs]), report=lambda _: None)
    assert more.compound["train"].texts == plain.compound["train"].texts + [r["text"] for r in rows]
    assert more.compound["train"].secondary[-2:] == ["SEARCH", None]
    assert more.fit_rows.texts[-2:] == [r["text"] for r in rows]  # they reach the heads' rows too
    with pytest.raises(ValueError, match="more_compound_train_files needs compound_train_file"):
        _read_corpus(
            tiny_config(more_compound_train_files=[pairs], compound_train_file=None, compound_dev_file=None),
            report=lambda _: None,
        )


def test_compound_label_files_rows_join_the_compound_head_rows_undistilled(tmp_path):
    """compound_label_files' rows are read as more_compound_train_files' are, last of all, and no
    distillation learns them: a teacher's stored targets need not cover them."""
    from training.fit.train import _read_corpus

    pairs = tmp_path / "train_everyday_pairs.jsonl"
    rows = [
        {"text": "text jess the banana bread recipe u gave me", "labels": ["ACTION", "MEMORY"]},
        {"text": "text jess my banana bread recipe", "label": "ACTION", "twin": True, "pair": "E-2"},
        {"text": "is my train late, if so tell mum", "labels": ["ACTION", "SEARCH"], "pair": "E-2"},
    ]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain = _read_corpus(tiny_config(), report=lambda _: None)
    more = _read_corpus(tiny_config(compound_label_files=[pairs]), report=lambda _: None)
    assert more.fit_rows.texts == plain.fit_rows.texts + [r["text"] for r in rows]
    assert more.compound["train"].secondary[-3:] == ["MEMORY", None, "SEARCH"]
    assert more.distilled == plain.distilled + [False] * len(rows)
    assert all(plain.distilled[len(plain.head_rows) :])  # compound_train_file's rows are distilled
    with pytest.raises(ValueError, match="compound_label_files needs compound_train_file"):
        _read_corpus(
            tiny_config(compound_label_files=[pairs], compound_train_file=None, compound_dev_file=None),
            report=lambda _: None,
        )
    with pytest.raises(ValueError, match="not both"):
        tiny_config(compound_label_files=[pairs], more_compound_train_files=[pairs])
