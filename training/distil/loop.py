"""The training loop both distillations share (training.distil.shallow: a student cut from the teacher's own
layers; training.distil.encoder: a student of another encoder).

- Batches hold messages of similar length (less padding) and are visited in a seeded shuffled order each
  epoch.
- AdamW's learning rate warms up over the first 10% of steps, then decays linearly to 0.
- A progress bar shows the steps; without a terminal (or with the bar off), a line per epoch gives the
  mean of each part of the loss.
- With ``bf16``, each step's forward pass and loss run under CPU autocast to bfloat16 (the weights, their
  gradients and AdamW's state stay fp32). Where the CPU computes bfloat16 natively (``native_bf16``: AMX
  or AVX512-BF16) a distillation epoch of MiniLM takes about 0.8x the time; elsewhere bfloat16 is
  emulated and slower, so the builds' default turns it on only there (training.fit.phases).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

Reporter = Callable[[str], None]
Step = Callable[[int], tuple[Any, Mapping[str, float]]]


def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 matrix products natively (AMX tiles or AVX512-BF16), as PyTorch
    reports it."""
    import torch

    checks = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    return any(bool(getattr(torch.cpu, name, lambda: False)()) for name in checks)


def length_batches(tokenizer, texts: Sequence[str], batch_size: int) -> list[list[int]]:
    """Indices of ``texts`` in batches of ``batch_size``, in order of their token count."""
    lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True)["input_ids"]]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def train_epochs(
    step: Step,
    student,
    *,
    learning_rate: float,
    freeze_embeddings: bool,
    dropout: bool,
    more_params: Sequence[dict] = (),
    batches: int,
    epochs: int,
    seed: int,
    started: float,
    report: Reporter,
    show_progress: bool,
    name: str = "distillation",
    bf16: bool = False,
) -> None:
    """Train ``student`` (a sentence-transformers body) for ``epochs`` passes over ``batches`` batches.
    ``step(b)`` computes batch b's loss and returns it with its parts (name -> value, the names in the
    order the epoch lines show them); this loop takes the optimiser step. ``freeze_embeddings`` keeps the
    student's token embedding table fixed; ``dropout`` off trains in eval mode; ``more_params`` are more
    AdamW parameter groups, each with its own ``lr``. ``started`` is when the distillation began
    (``time.perf_counter()``), for the epoch lines, which ``name`` the phase. ``bf16``: each step under
    CPU autocast to bfloat16 (module docstring). The student is left in eval mode."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    embeddings = student[0].auto_model.get_input_embeddings().weight
    embeddings.requires_grad_(not freeze_embeddings)
    trained = [p for p in student.parameters() if p.requires_grad]
    steps = epochs * batches
    warmup = max(1, steps // 10)
    opt = torch.optim.AdamW([{"params": trained, "lr": learning_rate}, *more_params], weight_decay=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, 1.0 - s / steps)
    )
    rng = random.Random(seed)
    student.train(dropout)
    with Progress(
        TextColumn(name),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not show_progress,
    ) as progress:
        task = progress.add_task("distil", total=steps)
        ids = list(range(batches))
        for epoch in range(epochs):
            rng.shuffle(ids)
            totals: dict[str, float] = {}
            for b in ids:
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                    loss, parts = step(b)
                for part, value in parts.items():
                    totals[part] = totals.get(part, 0.0) + value
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                progress.advance(task)
            if not progress.console.is_terminal or not show_progress:
                means = ", ".join(f"{part} {total / len(ids):.4f}" for part, total in totals.items())
                report(f"{name} epoch {epoch + 1}/{epochs}: {means} ({time.perf_counter() - started:.0f}s)")
    student.eval()
    embeddings.requires_grad_(True)


def head_log_probs(head, embeddings):
    """The log-probabilities ``head`` (weight, bias) gives each of ``embeddings``."""
    import torch

    weight, bias = head
    return torch.log_softmax(embeddings @ weight.T + bias, dim=1)


def head_divergence(embeddings, head, target_log_probs):
    """KL divergence, per message, from the teacher's decision (``target_log_probs``) to what ``head``
    (weight, bias: the teacher's head, training.distil.shallow.teacher_head) makes of the student's
    ``embeddings``."""
    import torch

    logp = head_log_probs(head, embeddings)
    return torch.nn.functional.kl_div(logp, target_log_probs, log_target=True, reduction="batchmean")


def clause_rows(
    body, texts: Sequence[str], batch: Sequence[int], split: Mapping[int, Sequence[str]], width=None
):
    """(row, token weights, clause) of each clause in ``split`` (a row of ``batch`` -> its clauses) that
    truncation left tokens of: 1/n on its n tokens of the batch's padded encoding by ``body``'s tokenizer,
    ``width`` wide (default: that encoding's)."""
    import numpy as np

    from router.compound import clause_token_masks

    enc = body.tokenizer(
        [texts[i] for i in batch],
        padding=True,
        truncation=True,
        max_length=body.max_seq_length,
        return_offsets_mapping=True,
    )
    width = width or len(enc["input_ids"][0])
    out = []
    for r, clauses in split.items():
        if not clauses:
            continue
        masks = clause_token_masks(texts[batch[r]], clauses, enc["offset_mapping"][r])
        for clause, mask in zip(clauses, masks, strict=True):
            if mask.any():  # not cut off by truncation
                w = np.zeros(width, dtype=np.float32)
                w[: len(mask)] = mask / mask.sum()
                out.append((r, w, clause))
    return out
