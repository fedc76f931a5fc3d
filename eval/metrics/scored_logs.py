"""Accuracy of a scored log: the metrics `intent-router score --with-labels` prints.

``router.score`` writes each row's label beside its decision; this module reads that decisions file
back (Parquet or JSONL) and scores it as ``intent-router eval`` scores a model, so the runtime scoring
code needs nothing from eval.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path

from router.intents import CONTINUATION, OUT_OF_SCOPE

COLUMNS = ["label", "top_label", "intent", "reason_code", "error"]
# decisions without an intent whose reason is itself the answer to a labelled row; a low-signal message
# (emoji, punctuation) is answered by the guardrail before the classifier, with no skill: out of scope
_REASON_LABELS = {"out_of_scope": OUT_OF_SCOPE, "needs_context": CONTINUATION, "low_signal": OUT_OF_SCOPE}


def decisions_metrics(decisions: str | Path, model_labels: Sequence[str]) -> dict:
    """Label metrics of a decisions file written with --with-labels; rows with an 'error' are left out.
    The classifier's top label (``top_label``: an intent, out of scope or a continuation) is scored as
    `intent-router eval` scores the model's top label."""
    labels, preds, decided = [], [], []
    for lab, top, intent, reason, error in _rows(Path(decisions)):
        if error is not None:
            continue
        labels.append(lab)
        preds.append(top if top is not None else _REASON_LABELS.get(reason))
        decided.append(intent if intent is not None else _REASON_LABELS.get(reason))
    return label_metrics(labels, preds, decided, model_labels)


def _rows(path: Path) -> Iterator[tuple]:
    if path.suffix.lower() == ".parquet":
        import pyarrow.parquet as pq

        table = pq.read_table(path, columns=COLUMNS)
        yield from zip(*(table.column(c).to_pylist() for c in COLUMNS), strict=True)
        return
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rec = json.loads(line)
                yield tuple(rec[c] for c in COLUMNS)


def label_metrics(
    labels: list[str], preds: list[str | None], decided: list[str | None], model_labels: Sequence[str]
) -> dict:
    """eval.metrics.classifier_metrics on the classifier's top label (as `intent-router eval` scores it), plus how the
    router's final decision fared: the share decided (an intent, or a reason that answers the row: not a
    fallback, a clarification or an invalid input) and its accuracy."""
    from eval.metrics.classifier_metrics import classification_metrics

    seen = set(labels) | set(preds)
    # the model's labels, continuations only when present
    names = [name for name in model_labels if name != CONTINUATION or name in seen]
    if any(p is None for p in preds):
        names.append("NONE")  # guardrail rows have no classifier intent
    idx = {name: i for i, name in enumerate(names)}
    y = [idx[lab] for lab in labels]
    yp = [idx[p if p is not None else "NONE"] for p in preds]
    m = classification_metrics(y, yp, names)
    n_dec = sum(1 for d in decided if d is not None)
    m["decided_share"] = round(n_dec / len(labels), 6) if labels else 0.0
    m["decided_accuracy"] = (
        round(sum(1 for d, lab in zip(decided, labels, strict=True) if d is not None and d == lab) / n_dec, 6)
        if n_dec
        else None
    )
    return m
