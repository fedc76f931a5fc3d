"""Evaluation metrics over probability matrices: classification (scikit-learn), calibration
(eval.calibration), threshold behaviour and out-of-scope recall.

Inputs are ``probs`` of shape (n, k) with columns in ``labels`` order and ``y`` the true label ids.
The prediction is the arg-max; its probability is the confidence. "Accepted" means
confidence >= tau (the router's rule); the rest go to the verifier (or the fallback).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.calibration import brier, ece, nll, reliability_bins

DEFAULT_TAUS = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))  # 0.30, 0.35, ..., 0.95
DEFAULT_BINS = 15


def _r(x: float | None, nd: int = 6) -> float | None:
    return None if x is None else round(float(x), nd)


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


def at_threshold(probs: np.ndarray, y: Sequence[int], tau: float) -> dict:
    """Router behaviour at one threshold: how much is accepted and how right the accepted part is."""
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=int)
    n = len(y)
    conf, correct = probs.max(axis=1), probs.argmax(axis=1) == y
    accepted = conf >= tau
    k = int(accepted.sum())
    return {
        "tau": _r(tau, 4),
        "accepted": k,
        "accepted_share": _r(k / n) if n else 0.0,
        "accepted_accuracy": _r(correct[accepted].mean()) if k else None,
        "to_verifier_share": _r((n - k) / n) if n else 0.0,
        "below_accuracy": _r(correct[~accepted].mean()) if n - k else None,
    }


def threshold_sweep(
    probs: np.ndarray,
    y: Sequence[int],
    taus: Sequence[float] = DEFAULT_TAUS,
    oos_probs: np.ndarray | None = None,
) -> list[dict]:
    """One ``at_threshold`` row per tau (sorted, deduplicated); with ``oos_probs`` each row also has the
    out-of-scope recall at that tau."""
    rows = []
    for tau in sorted({round(float(t), 4) for t in taus}):
        row = at_threshold(probs, y, tau)
        row["oos_recall"] = oos_recall(oos_probs, tau)["recall"] if oos_probs is not None else None
        rows.append(row)
    return rows


def oos_recall(oos_probs: np.ndarray, tau: float, low_signal: Sequence[bool] | None = None) -> dict:
    """Out-of-scope messages have no right intent: the router gets them right by not accepting one.

    ``recall`` is the share whose confidence is below tau. With ``low_signal`` (the router's guardrail
    verdict per message), ``router_recall`` also counts messages the guardrail stops before the classifier.
    """
    oos_probs = np.asarray(oos_probs, dtype=np.float64)
    n = len(oos_probs)
    conf = oos_probs.max(axis=1) if n else np.zeros(0)
    below = conf < tau
    out = {
        "n": int(n),
        "tau": _r(tau, 4),
        "recall": _r(below.mean()) if n else None,
        "mean_confidence": _r(conf.mean()) if n else None,
    }
    if low_signal is not None:
        ls = np.asarray(low_signal, dtype=bool)
        out["guardrail_share"] = _r(ls.mean()) if n else None
        out["router_recall"] = _r((below | ls).mean()) if n else None
    return out


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


def percentiles(values_ms: Sequence[float]) -> dict:
    v = np.asarray(values_ms, dtype=np.float64)
    if len(v) == 0:
        return {"n": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None, "max_ms": None}
    p50, p95, p99 = np.percentile(v, [50, 95, 99])
    return {
        "n": len(v),
        "p50_ms": _r(p50, 4),
        "p95_ms": _r(p95, 4),
        "p99_ms": _r(p99, 4),
        "mean_ms": _r(v.mean(), 4),
        "max_ms": _r(v.max(), 4),
    }
