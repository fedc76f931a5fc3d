"""The label phase: after its distillation (or contrastive phase), the body learns the labels of the
single-intent rows directly.

A distilled student learns what its teacher makes of each text, so it reads a kind of request no better
than the teacher does; rows the teacher's stored targets do not cover (``label_files``) reach the body
through no target at all. In this phase the body learns every single-intent row's label through a linear
head (cross-entropy), while an anchor holds each row's embedding near the one the body gave it before the
phase (the mean cosine distance between the two), so the geometry the heads, the in-scope distance and the
clause and turn readers are fitted on stays the distilled one. The head starts as the logistic head fitted
on those first embeddings and is dropped afterwards: the model's heads are fitted on the tuned body, as
after any other phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence

Reporter = Callable[[str], None]
HEAD_LEARNING_RATE = 1e-3  # the linear head starts fitted; it moves faster than the body


def tune_on_labels(
    body,
    texts: Sequence[str],
    labels: Sequence[str],
    *,
    epochs: int,
    learning_rate: float,
    anchor_weight: float,
    batch_size: int,
    seed: int,
    head_params: Mapping | None = None,
    freeze_embeddings: bool = True,
    bf16: bool = False,
    report: Reporter = print,
    show_progress: bool = True,
):
    """Train ``body`` (a sentence-transformers body, changed in place and returned) for ``epochs`` on
    ``texts`` and their ``labels`` (module docstring). A text given twice counts twice. Batches hold
    messages of similar length in a seeded shuffled order; the learning rate warms up over the first 10% of
    steps, then decays to 0; ``bf16``: the steps under CPU autocast to bfloat16 (training.distil.loop)."""
    import torch

    from training.distil.encoder import teacher_embeddings
    from training.distil.loop import length_batches, train_epochs

    texts, labels = list(texts), list(labels)
    if len(texts) != len(labels):
        raise ValueError(
            f"the label phase needs one label per text ({len(texts)} texts, {len(labels)} labels)"
        )
    classes = sorted(set(labels))
    if len(classes) < 2:
        raise ValueError(f"the label phase needs at least two labels, found {classes}")
    torch.manual_seed(seed)
    t0 = time.perf_counter()
    batches = length_batches(body.tokenizer, texts, batch_size)
    before = teacher_embeddings(body, texts, batch_size)  # the body's own, before the phase
    head = _fitted_head(before, labels, head_params or {})
    y = torch.tensor([classes.index(label) for label in labels])
    report(
        f"label phase: {len(texts)} rows, {len(classes)} labels, {len(batches)} batches a pass "
        f"(the head's start fitted in {time.perf_counter() - t0:.0f}s)"
    )

    def step(b: int):
        batch = batches[b]
        out = body(body.preprocess([texts[i] for i in batch]))
        emb = torch.nn.functional.normalize(out["sentence_embedding"], dim=1)
        ce = torch.nn.functional.cross_entropy(head(emb), y[batch])
        anchor = (1.0 - (emb * before[batch]).sum(dim=1)).mean()
        parts = {"labels": ce.detach().item(), "anchor": anchor.detach().item()}
        return ce + anchor_weight * anchor, parts

    train_epochs(
        step,
        body,
        learning_rate=learning_rate,
        freeze_embeddings=freeze_embeddings,
        dropout=True,
        more_params=[{"params": list(head.parameters()), "lr": HEAD_LEARNING_RATE}],
        batches=len(batches),
        epochs=epochs,
        seed=seed,
        started=t0,
        report=report,
        show_progress=show_progress,
        name="label phase",
        bf16=bf16,
    )
    return body


def _fitted_head(embeddings, labels: list[str], head_params: Mapping):
    """A linear layer holding the logistic head fitted on ``embeddings`` (the model head's parameters), one
    output per label in sorted order (scikit-learn's ``classes_``)."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from training.fit.head import softmax_weights

    coef, intercept = softmax_weights(LogisticRegression(**dict(head_params)).fit(embeddings.numpy(), labels))
    head = torch.nn.Linear(embeddings.shape[1], coef.shape[0])
    with torch.no_grad():
        head.weight.copy_(torch.from_numpy(coef))
        head.bias.copy_(torch.from_numpy(intercept))
    return head
