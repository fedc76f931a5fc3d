"""Evaluation metrics over probability matrices: classification (scikit-learn), calibration
(eval.metrics.calibration) and the misclassified list. Threshold behaviour and out-of-scope recall live in
eval.metrics.thresholds, latency percentiles in eval.metrics.latency.

Inputs are ``probs`` of shape (n, k) with columns in ``labels`` order and ``y`` the true label ids.
The prediction is the arg-max; its probability is the confidence.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.metrics.calibration import brier, ece, nll, reliability_bins

DEFAULT_BINS = 15


def rounded(x: float | None, nd: int = 6) -> float | None:
    """Floats in reports are rounded to 6 places (4 for thresholds and milliseconds)."""
    return None if x is None else round(float(x), nd)


_r = rounded


def classification_metrics(y_true: Sequence[int], y_pred: Sequence[int], labels: Sequence[str]) -> dict:
    """Accuracy, macro/weighted F1, per-class precision/recall/F1/support and the confusion matrix
    (rows: true label, columns: predicted label, both in ``labels`` order)."""
    from sklearn.metrics import accuracy_score, confusion_matrix, f1_score, precision_recall_fscore_support

    y_true, y_pred = np.asarray(y_true, dtype=int), np.asarray(y_pred, dtype=int)
    if len(y_true) == 0:
        raise ValueError("no examples to evaluate")
    ids = list(range(len(labels)))
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, labels=ids, zero_division=0)
    per_class = {
        l: {"precision": _r(p[i]), "recall": _r(r[i]), "f1": _r(f[i]), "support": int(s[i])}
        for i, l in enumerate(labels)
    }
    return {
        "n": len(y_true),
        "accuracy": _r(accuracy_score(y_true, y_pred)),
        # Over the labels present in the data or the predictions (scikit-learn's default).
        "macro_f1": _r(f1_score(y_true, y_pred, average="macro", zero_division=0)),
        "weighted_f1": _r(f1_score(y_true, y_pred, labels=ids, average="weighted", zero_division=0)),
        "per_class": per_class,
        "confusion_matrix": {
            "labels": list(labels),
            "matrix": confusion_matrix(y_true, y_pred, labels=ids).tolist(),
        },
    }


def calibration_metrics(probs: np.ndarray, y: Sequence[int], n_bins: int = DEFAULT_BINS) -> dict:
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=int)
    bins = [
        {**b, "confidence": _r(b["confidence"]), "accuracy": _r(b["accuracy"])}
        for b in reliability_bins(probs, y, n_bins)
    ]
    return {
        "n_bins": n_bins,
        "ece": _r(ece(probs, y, n_bins)),
        "nll": _r(nll(probs, y)),
        "brier": _r(brier(probs, y)),
        "bins": bins,
    }


def misclassified(
    texts: Sequence[str],
    y: Sequence[int],
    probs: np.ndarray,
    labels: Sequence[str],
    tau: float,
    rows: Sequence[int] | None = None,
    where: Sequence[str] | None = None,
) -> list[dict]:
    """Wrong top-1 predictions, most confident first (confident mistakes pass the threshold unchecked)."""
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=int)
    pred, conf = probs.argmax(axis=1), probs.max(axis=1)
    out = []
    for i in np.flatnonzero(pred != y):
        out.append(
            {
                "row": int(rows[i]) if rows is not None else int(i) + 1,
                "where": where[i] if where is not None else None,
                "text": texts[i],
                "label": labels[y[i]],
                "predicted": labels[pred[i]],
                "confidence": _r(conf[i]),
                "label_probability": _r(probs[i, y[i]]),
                "accepted": bool(conf[i] >= tau),
            }
        )
    out.sort(key=lambda e: (-e["confidence"], e["row"]))
    return out
