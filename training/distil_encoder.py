"""Distillation across encoders: a smaller body of another architecture or width (the student, e.g.
all-MiniLM-L6-v2, 384 dimensions) learns what a larger fine-tuned body (the teacher, e.g.
all-mpnet-base-v2, 768 dimensions) makes of each message, so the router keeps the small body's speed.

The targets, computed once from the teacher:
- its normalised embedding, which the student reaches through a linear map from its width to the
  teacher's (squared error). The map is learned with the student, starts as the least-squares fit of the
  student's first embeddings to the teacher's, and is dropped afterwards;
- the similarities within a batch: the cosine similarity of each pair of messages in the student should
  be the teacher's (mean squared error). This is the geometry the router's heads are fitted on, read in
  the student's own space;
- optionally the teacher's decision (``head_weight``): a logistic head fitted on the teacher's embeddings
  of the labeled messages, applied to the mapped student embedding, should give the teacher's
  probabilities (KL divergence).

The heads are then fitted on the student, as after any other body (training.intent_model).
training.distil is the other distillation: a student cut from the teacher's own layers.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence

Reporter = Callable[[str], None]
MAP_LEARNING_RATE = 1e-3  # the linear map starts from a least-squares fit; it moves faster than the body


def distil_encoder(
    teacher,
    student,
    texts: Sequence[str],
    *,
    epochs: int,
    learning_rate: float,
    batch_size: int,
    seed: int,
    similarity_weight: float = 1.0,
    freeze_embeddings: bool = True,
    dropout: bool = True,
    labels: Mapping[str, str] | None = None,
    head_weight: float = 0.0,
    head_params: Mapping | None = None,
    report: Reporter = print,
    show_progress: bool = True,
):
    """Train ``student`` (a sentence-transformers body, changed in place and returned) to match
    ``teacher`` on ``texts`` (module docstring). Batches hold messages of similar length, in a seeded
    shuffled order; the learning rate warms up over the first 10% of steps, then decays to 0.
    ``freeze_embeddings`` keeps the student's token embedding table fixed; ``dropout`` off trains in eval
    mode. ``labels`` (text -> label) and ``head_params`` (the model head's) give the teacher's head."""
    import torch
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from training.distil import teacher_head

    texts = list(dict.fromkeys(texts))
    if not texts:
        raise ValueError("distillation needs texts")
    torch.manual_seed(seed)
    rng = random.Random(seed)
    lengths = [len(ids) for ids in student.tokenizer(texts, truncation=True)["input_ids"]]
    order = sorted(range(len(texts)), key=lengths.__getitem__)
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]

    t0 = time.perf_counter()
    teacher.eval()
    student.eval()
    with torch.no_grad():
        target = [_embed(teacher, [texts[i] for i in batch]) for batch in batches]
        first = torch.cat([_embed(student, [texts[i] for i in batch]) for batch in batches])
    report(
        f"teacher targets for {len(texts)} texts ({target[0].shape[1]} dimensions; the student has "
        f"{first.shape[1]}): {time.perf_counter() - t0:.0f}s"
    )
    linear = torch.nn.Linear(first.shape[1], target[0].shape[1], bias=False)
    with torch.no_grad():  # the least-squares map from the student's first embeddings to the teacher's
        linear.weight.copy_(torch.linalg.lstsq(first, torch.cat(target)).solution.T)
    head = teacher_head(texts, batches, target, labels or {}, head_params or {}) if head_weight else None
    if head is not None:
        weight, bias = head
        head_targets = [torch.log_softmax(t @ weight.T + bias, dim=1) for t in target]

    embeddings = student[0].auto_model.get_input_embeddings().weight
    embeddings.requires_grad_(not freeze_embeddings)
    steps = epochs * len(batches)
    warmup = max(1, steps // 10)
    opt = torch.optim.AdamW(
        [
            {"params": [p for p in student.parameters() if p.requires_grad], "lr": learning_rate},
            {"params": linear.parameters(), "lr": MAP_LEARNING_RATE},
        ],
        weight_decay=0.01,
    )
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * max(0.0, 1.0 - s / steps)
    )
    student.train(dropout)
    with Progress(
        TextColumn("distillation"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not show_progress,
    ) as progress:
        task = progress.add_task("distil", total=steps)
        ids = list(range(len(batches)))
        for epoch in range(epochs):
            rng.shuffle(ids)
            totals = {"embedding": 0.0, "similarities": 0.0, "teacher head": 0.0}
            for b in ids:
                features = student.preprocess([texts[i] for i in batches[b]])
                emb = student(features)["sentence_embedding"]
                emb = torch.nn.functional.normalize(emb, dim=1)
                mapped = torch.nn.functional.normalize(linear(emb), dim=1)
                loss = ((mapped - target[b]) ** 2).sum(dim=1).mean()
                totals["embedding"] += loss.detach().item()
                if similarity_weight:
                    sim = ((emb @ emb.T - target[b] @ target[b].T) ** 2).mean()
                    totals["similarities"] += sim.detach().item()
                    loss = loss + similarity_weight * sim
                if head is not None:
                    logp = torch.log_softmax(mapped @ weight.T + bias, dim=1)
                    kl = torch.nn.functional.kl_div(
                        logp, head_targets[b], log_target=True, reduction="batchmean"
                    )
                    totals["teacher head"] += kl.detach().item()
                    loss = loss + head_weight * kl
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
                progress.advance(task)
            if not progress.console.is_terminal or not show_progress:
                parts = ", ".join(f"{k} {v / len(ids):.4f}" for k, v in totals.items() if v)
                report(f"distillation epoch {epoch + 1}/{epochs}: {parts} ({time.perf_counter() - t0:.0f}s)")
    student.eval()
    embeddings.requires_grad_(True)
    return student


def _embed(body, texts: Sequence[str]):
    """Normalised sentence embeddings of ``texts`` by a sentence-transformers body, as float32."""
    import torch

    out = body(body.preprocess(list(texts)))["sentence_embedding"]
    return torch.nn.functional.normalize(out.float(), dim=1)
