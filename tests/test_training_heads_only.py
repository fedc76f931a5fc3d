"""Rows of ``heads_only_file`` train the heads and not the contrastive phase (training.train, a real
SetFit run on the tiny fixture corpus)."""

from __future__ import annotations

import json

import pytest

import training.fit_phases as fit_phases
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


@pytest.mark.slow
def test_heads_only_rows_reach_the_heads_and_not_the_contrastive_phase(tmp_path, monkeypatch):
    from training.train import train

    everyday = tmp_path / "train_everyday.jsonl"
    everyday.write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in EVERYDAY))
    seen: list[list[str]] = []
    contrastive_rows = fit_phases.contrastive_rows

    def recording(ds, oos_rows, seed):
        seen.append(list(ds["text"]))
        return contrastive_rows(ds, oos_rows, seed)

    monkeypatch.setattr(fit_phases, "contrastive_rows", recording)
    config = tiny_config(heads_only_file=everyday, max_steps=10)
    manifest = train(config, tmp_path / "model", report=lambda _: None, show_progress=False)

    (body_texts,) = seen
    train_texts = [json.loads(line)["text"] for line in config.train_file.read_text().splitlines()]
    assert body_texts == train_texts  # the train file's rows, in order, and nothing else
    data = manifest.training["data"]
    assert data["rows"]["heads_only"] == len(EVERYDAY) and str(everyday) in data["files"]
    assert data["label_counts"]["ACTION"] == 8 + 2  # the head's prior counts every row it learned from
    assert "heads_only_file" not in manifest.training["hyperparameters"]


def test_heads_only_rows_must_use_the_train_files_labels(tmp_path):
    from eval.data_sources import DataError
    from training.train import train

    odd = tmp_path / "train_everyday.jsonl"
    odd.write_text(json.dumps({"text": "water the plants at six", "label": "GARDENING"}) + "\n")
    with pytest.raises((DataError, ValueError), match="GARDENING"):
        train(
            tiny_config(heads_only_file=odd), tmp_path / "model", report=lambda _: None, show_progress=False
        )
