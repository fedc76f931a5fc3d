"""Distillation across encoders: a smaller body of another architecture or width (the student, e.g.
all-MiniLM-L6-v2, 384 dimensions) learns what a larger fine-tuned body (the teacher, e.g.
all-mpnet-base-v2, 768 dimensions) makes of each message, so the router keeps the small body's speed.

All the targets derive from the teacher's normalised embedding of each text, computed once
(``teacher_embeddings``) or read from a file (training.distil.teacher_targets), so the teacher need not be
loaded while the student trains:
- that embedding, which the student reaches through a linear map from its width to the
  teacher's (squared error). The map is learned with the student, starts as the least-squares fit of the
  student's first embeddings of a sample of the texts to the teacher's, and is dropped afterwards;
- the similarities within a batch: the cosine similarity of each pair of messages in the student should
  be the teacher's (mean squared error). This is the geometry the router's heads are fitted on, read in
  the student's own space;
- optionally the teacher's decision (``head_weight``): a logistic head fitted on the teacher's embeddings
  of the labeled messages, applied to the mapped student embedding, should give the teacher's
  probabilities (KL divergence);
- optionally the clauses in context (``clause_weight``), for a router that reads a message's clauses from
  its own run (router.manifest.ClauseReader) instead of a second one: the mean of the student's last
  token states over each clause of a message (router.clauses), normalised and mapped, should be the
  teacher's embedding of the clause read alone. Clauses whose own text has no target are skipped.

The heads are then fitted on the student, as after any other body (training.fit.intent_model).
training.distil.shallow is the other distillation: a student cut from the teacher's own layers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

Reporter = Callable[[str], None]
MAP_LEARNING_RATE = 1e-3  # the linear map starts from a least-squares fit; it moves faster than the body
MAP_FIT_TEXTS = 4096  # texts whose first embeddings the map's least-squares start is fitted on


def teacher_embeddings(teacher, texts: Sequence[str], batch_size: int = 32):
    """The ``teacher`` body's normalised embeddings of ``texts`` (float32 tensor, one row each), computed
    in batches of similar length."""
    import torch

    from training.distil.loop import length_batches

    teacher.eval()
    out = [None] * len(texts)
    with torch.no_grad():
        for batch in length_batches(teacher.tokenizer, texts, batch_size):
            for i, row in zip(batch, embed_texts(teacher, [texts[i] for i in batch]), strict=True):
                out[i] = row
    return torch.stack(out) if out else torch.zeros(0)


def distil_encoder(
    student,
    texts: Sequence[str],
    targets,
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
    clause_weight: float = 0.0,
    bf16: bool = False,
    report: Reporter = print,
    show_progress: bool = True,
):
    """Train ``student`` (a sentence-transformers body, changed in place and returned) to match the
    teacher whose normalised embeddings of ``texts`` (distinct) are ``targets`` (module docstring; from
    ``teacher_embeddings`` or a stored file, training.distil.teacher_targets). Batches hold messages of similar
    length, in a seeded shuffled order; the learning rate warms up over the first 10% of steps, then
    decays to 0. ``freeze_embeddings`` keeps the student's token embedding table fixed; ``dropout`` off
    trains in eval mode. ``labels`` (text -> label) and ``head_params`` (the model head's) give the
    teacher's head; ``clause_weight`` > 0 adds the clauses-in-context target; ``bf16``: the steps under
    CPU autocast to bfloat16 (training.distil.loop)."""
    import torch

    from training.distil.loop import length_batches, train_epochs
    from training.distil.shallow import teacher_head

    texts = list(texts)
    if not texts:
        raise ValueError("distillation needs texts")
    if len(set(texts)) != len(texts) or len(targets) != len(texts):
        raise ValueError(f"distillation needs distinct texts, one target each ({len(texts)}, {len(targets)})")
    targets = torch.as_tensor(targets, dtype=torch.float32)
    torch.manual_seed(seed)
    batches = length_batches(student.tokenizer, texts, batch_size)

    t0 = time.perf_counter()
    target, linear = _start(student, texts, batches, targets, seed, report)
    loss = EncoderLoss(student, texts, batches, targets, target, linear, similarity_weight)
    head = teacher_head(texts, batches, target, labels or {}, head_params or {}) if head_weight else None
    if head is not None:
        loss.with_head(head, head_weight)
    clauses = clause_batches(student, texts, batches) if clause_weight else []
    if clauses:
        report(f"clauses in context: {sum(len(c[2]) for c in clauses if c)} clause targets")
        loss.clauses, loss.clause_weight = clauses, clause_weight
    train_epochs(
        loss,
        student,
        learning_rate=learning_rate,
        freeze_embeddings=freeze_embeddings,
        dropout=dropout,
        more_params=[{"params": list(linear.parameters()), "lr": MAP_LEARNING_RATE}],
        batches=len(batches),
        epochs=epochs,
        seed=seed,
        started=t0,
        report=report,
        show_progress=show_progress,
        bf16=bf16,
    )
    return student


def _start(student, texts: list[str], batches, targets, seed: int, report: Reporter):
    """Each batch's targets, and the linear map from the student's space to the teacher's, started at the
    least-squares map from the student's first embeddings of a seeded sample of the batches (MAP_FIT_TEXTS
    texts: a map of 384 x 768 weights is settled long before the whole corpus, whose pass cost a tenth of
    the distillation)."""
    import random

    import torch

    student.eval()
    target = [targets[batch] for batch in batches]
    sample = list(range(len(batches)))
    random.Random(seed).shuffle(sample)
    while sum(len(batches[b]) for b in sample) > MAP_FIT_TEXTS and len(sample) > 1:
        sample.pop()
    with torch.no_grad():
        first = torch.cat([embed_texts(student, [texts[i] for i in batches[b]]) for b in sample])
    report(
        f"distilling {len(texts)} texts ({target[0].shape[1]} dimensions in the teacher; the student has "
        f"{first.shape[1]}; the map starts from {first.shape[0]} of them)"
    )
    linear = torch.nn.Linear(first.shape[1], target[0].shape[1], bias=False)
    with torch.no_grad():  # the least-squares map from the student's first embeddings to the teacher's
        # (gelsd: torch's default driver, gelsy, gave different maps run to run on one CPU)
        fitted = torch.cat([target[b] for b in sample])
        linear.weight.copy_(torch.linalg.lstsq(first, fitted, driver="gelsd").solution.T)
    return target, linear


class EncoderLoss:
    """One batch's loss (the module docstring's targets) and its parts, called by the training loop:
    the mapped embedding against the teacher's, their similarities, the teacher's head, and the clauses
    read in context."""

    def __init__(self, student, texts, batches, targets, target, linear, similarity_weight: float):
        self.student, self.texts, self.batches = student, texts, batches
        self.targets, self.target, self.linear = targets, target, linear
        self.similarity_weight = similarity_weight
        self.head = None
        self.head_weight = 0.0
        self.clauses: list = []
        self.clause_weight = 0.0

    def with_head(self, head, weight: float) -> None:
        from training.distil.loop import head_log_probs

        self.head, self.head_weight = head, weight
        self.head_targets = [head_log_probs(head, t) for t in self.target]

    def __call__(self, b: int):
        import torch

        from training.distil.loop import head_divergence

        normalize = torch.nn.functional.normalize
        out = self.student(self.student.preprocess([self.texts[i] for i in self.batches[b]]))
        emb = normalize(out["sentence_embedding"], dim=1)
        mapped = normalize(self.linear(emb), dim=1)
        target = self.target[b]
        loss = ((mapped - target) ** 2).sum(dim=1).mean()
        parts = {"embedding": loss.detach().item()}
        if self.similarity_weight:
            sim = ((emb @ emb.T - target @ target.T) ** 2).mean()
            parts["similarities"] = sim.detach().item()
            loss = loss + self.similarity_weight * sim
        if self.head is not None:
            kl = head_divergence(mapped, self.head, self.head_targets[b])
            parts["teacher head"] = kl.detach().item()
            loss = loss + self.head_weight * kl
        if self.clauses and self.clauses[b] is not None:
            rows, weights, which = self.clauses[b]
            states = out["token_embeddings"][rows][:, : weights.shape[1]]
            pooled = torch.einsum("ct,cth->ch", weights[:, : states.shape[1]], states)
            pooled = normalize(self.linear(normalize(pooled, dim=1)), dim=1)
            in_context = ((pooled - self.targets[which]) ** 2).sum(dim=1).mean()
            parts["clauses in context"] = in_context.detach().item()
            loss = loss + self.clause_weight * in_context
        return loss, parts


def clause_batches(student, texts: Sequence[str], batches: Sequence[Sequence[int]]) -> list:
    """Per batch, None or (the row of each clause, its token weights (clauses, tokens): 1/n on its n
    tokens of the batch's padded encoding, the index in ``texts`` of the clause's own text), for the
    messages that split into clauses (router.clauses) whose clauses have a target of their own."""
    import numpy as np
    import torch

    from router.clauses import split_clauses
    from training.distil.loop import clause_rows

    index = {t: k for k, t in enumerate(texts)}
    out = []
    for batch in batches:
        split = {r: [c for c in split_clauses(texts[i]) if c in index] for r, i in enumerate(batch)}
        if not any(split.values()):
            out.append(None)
            continue
        found = clause_rows(student, texts, batch, split)
        rows, weights, which = (
            [r for r, _, _ in found],
            [w for _, w, _ in found],
            [index[c] for _, _, c in found],
        )
        out.append(
            (torch.tensor(rows), torch.from_numpy(np.stack(weights)), torch.tensor(which)) if rows else None
        )
    return out


def embed_texts(body, texts: Sequence[str]):
    """Normalised sentence embeddings of ``texts`` by a sentence-transformers body, as float32."""
    import torch

    out = body(body.preprocess(list(texts)))["sentence_embedding"]
    return torch.nn.functional.normalize(out.float(), dim=1)
