"""Threshold metrics, in one place: what the router does at a confidence threshold tau.

"Accepted" means confidence >= tau (the router's rule); the rest go to the verifier (or the fallback).
An out-of-scope message is right when it is not accepted. ``at_threshold``/``threshold_sweep``/
``oos_recall`` feed the evaluation report; ``choose_threshold``/``in_scope_at_threshold`` pick and
apply a tau on validation data (the public benchmarks' protocol).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.metrics.classifier_metrics import rounded as _r
from router.intents import CONTINUATION, OUT_OF_SCOPE

DEFAULT_TAUS = tuple(round(0.30 + 0.05 * i, 2) for i in range(14))  # 0.30, 0.35, ..., 0.95


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
    labels: Sequence[str] | None = None,
) -> list[dict]:
    """One ``at_threshold`` row per tau (sorted, deduplicated); with ``oos_probs`` each row also has the
    out-of-scope recall at that tau."""
    rows = []
    for tau in sorted({round(float(t), 4) for t in taus}):
        row = at_threshold(probs, y, tau)
        row["oos_recall"] = (
            oos_recall(oos_probs, tau, labels=labels)["recall"] if oos_probs is not None else None
        )
        rows.append(row)
    return rows


def oos_recall(
    oos_probs: np.ndarray,
    tau: float,
    low_signal: Sequence[bool] | None = None,
    labels: Sequence[str] | None = None,
) -> dict:
    """Out-of-scope messages have no right intent: the router gets them right by not accepting one.

    ``recall`` is the share not accepted as an intent: confidence below tau, or (``labels`` naming an
    OUT_OF_SCOPE column) the out-of-scope class on top. With ``low_signal`` (the router's guardrail
    verdict per message), ``router_recall`` also counts messages the guardrail stops before the classifier.
    The in-scope distance is not counted here (eval.metrics.out_of_scope adds it).
    """
    oos_probs = np.asarray(oos_probs, dtype=np.float64)
    n = len(oos_probs)
    conf = oos_probs.max(axis=1) if n else np.zeros(0)
    below = conf < tau
    for reserved in (OUT_OF_SCOPE, CONTINUATION):  # neither routes to an intent
        if labels is not None and reserved in labels and n:
            below |= oos_probs.argmax(axis=1) == list(labels).index(reserved)
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


THRESHOLD_CRITERIA = {
    "balanced": "max (in-scope accuracy + out-of-scope recall) / 2 on val",
    "pooled": "max accuracy over val in-scope + oos_val pooled (out-of-scope right when below tau)",
}


def choose_threshold(
    conf_in: np.ndarray, correct_in: np.ndarray, conf_oos: np.ndarray, criterion: str = "balanced"
) -> dict:
    """The tau that maximises ``criterion`` on a validation set.

    In-scope accuracy counts a message right only if it is accepted (confidence >= tau) and its
    arg-max is right; out-of-scope recall is the share of out-of-scope messages below tau.
    ``balanced`` weighs the two equally; ``pooled`` is plain accuracy over all validation messages, so
    it weighs them by their counts (CLINC150 val: 3,000 in-scope, 100 out-of-scope). Candidates are 0
    and the midpoints between consecutive distinct confidences; ties go to the lowest tau."""
    if criterion not in THRESHOLD_CRITERIA:
        raise ValueError(f"criterion must be one of {sorted(THRESHOLD_CRITERIA)}")
    conf_in, correct_in, conf_oos = (
        np.asarray(conf_in, dtype=np.float64),
        np.asarray(correct_in, dtype=bool),
        np.asarray(conf_oos, dtype=np.float64),
    )
    if not len(conf_in) or not len(conf_oos):
        raise ValueError("need in-scope and out-of-scope validation rows to choose a threshold")
    u = np.unique(np.concatenate([conf_in, conf_oos]))
    taus = np.concatenate([[0.0], (u[:-1] + u[1:]) / 2, [u[-1] + 1e-9]])
    right = np.sort(conf_in[correct_in])
    in_acc = (len(right) - np.searchsorted(right, taus, side="left")) / len(conf_in)
    oos_rec = np.searchsorted(np.sort(conf_oos), taus, side="left") / len(conf_oos)
    if criterion == "balanced":
        score = (in_acc + oos_rec) / 2
    else:
        score = (in_acc * len(conf_in) + oos_rec * len(conf_oos)) / (len(conf_in) + len(conf_oos))
    best = int(np.argmax(score))
    return {
        "tau": float(taus[best]),
        "criterion": THRESHOLD_CRITERIA[criterion],
        "val_in_scope_accuracy": float(in_acc[best]),
        "val_oos_recall": float(oos_rec[best]),
        "val_score": float(score[best]),
    }


def in_scope_at_threshold(
    conf_in: np.ndarray, correct_in: np.ndarray, conf_oos: np.ndarray, tau: float
) -> dict:
    """In-scope accuracy counting only accepted messages, the accepted share, and out-of-scope recall
    (unrounded, for the public benchmarks' protocol)."""
    conf_in, correct_in, conf_oos = (
        np.asarray(conf_in),
        np.asarray(correct_in, dtype=bool),
        np.asarray(conf_oos),
    )
    return {
        "in_scope_accuracy": float((correct_in & (conf_in >= tau)).mean()),
        "in_scope_accepted_share": float((conf_in >= tau).mean()),
        "oos_recall": float((conf_oos < tau).mean()),
    }
