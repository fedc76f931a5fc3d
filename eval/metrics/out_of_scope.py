"""Out-of-scope metrics: what the router does with each message when no verifier is configured.

The router's rule (router.routing): a message is *out of scope* when the model's OUT_OF_SCOPE class
has confidence >= tau (signal ``classifier``) or its in-scope distance exceeds the model's distance
threshold (signal ``distance``); otherwise it is *accepted* as its top intent when that confidence is
>= tau, and *below* (verifier or fallback) when not. An out-of-scope message is handled right when it
is not routed to an intent (out of scope or below); an in-scope message is lost when called out of
scope.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.metrics.classifier_metrics import rounded as _r
from router.intents import CONTINUATION, OUT_OF_SCOPE


def outcomes(
    probs: np.ndarray,
    labels: Sequence[str],
    tau: float,
    distance: np.ndarray | None = None,
    distance_threshold: float | None = None,
) -> dict[str, np.ndarray]:
    """What a single router-wide threshold ``tau`` would do, from the probabilities alone: the threshold
    sweeps' what-if (scope_sweep). The routed figures at the router's own thresholds come from its
    Decisions (eval.metrics.routed). Per message: ``pred`` (arg-max index), ``by_classifier`` and ``by_distance``
    (the out-of-scope signals), ``out_of_scope`` (either), ``accepted`` (routed to its intent) and
    ``below``."""
    probs = np.asarray(probs, dtype=np.float64)
    n = len(probs)
    pred, conf = (probs.argmax(axis=1), probs.max(axis=1)) if n else (np.zeros(0, int), np.zeros(0))
    oos_col = list(labels).index(OUT_OF_SCOPE) if OUT_OF_SCOPE in labels else None
    by_classifier = (pred == oos_col) & (conf >= tau) if oos_col is not None else np.zeros(n, bool)
    if distance is not None and distance_threshold is not None:
        by_distance = np.asarray(distance, dtype=np.float64) > distance_threshold
    else:
        by_distance = np.zeros(n, bool)
    out_of_scope = by_classifier | by_distance
    accepted = ~out_of_scope & (conf >= tau)
    if oos_col is not None:
        accepted &= pred != oos_col
    if CONTINUATION in labels:  # with no previous turn a continuation gets no intent (needs_context)
        accepted &= pred != list(labels).index(CONTINUATION)
    return {
        "pred": pred,
        "by_classifier": by_classifier,
        "by_distance": by_distance,
        "out_of_scope": out_of_scope,
        "accepted": accepted,
        "below": ~out_of_scope & ~accepted,
    }


def _share(mask: np.ndarray) -> float | None:
    return _r(float(np.mean(mask))) if len(mask) else None


def in_scope_summary(o: dict[str, np.ndarray], y: np.ndarray) -> dict:
    """In-scope messages (rows of ``o`` and ``y`` already restricted to them)."""
    correct = o["pred"] == y
    acc = o["accepted"]
    return {
        "n": len(y),
        "accuracy": _share(correct),
        "called_out_of_scope": _share(o["out_of_scope"]),
        "called_by_classifier": _share(o["by_classifier"]),
        "called_by_distance": _share(o["by_distance"]),
        "accepted_share": _share(acc),
        "accepted_accuracy": _r(float(correct[acc].mean())) if acc.any() else None,
    }


def out_of_scope_summary(o: dict[str, np.ndarray], low_signal: Sequence[bool] | None = None) -> dict:
    """Out-of-scope messages: ``recall`` is the share called out of scope, ``not_routed`` the share not
    routed to an intent (out of scope, or below tau); ``guardrail`` adds the router's low-signal stop."""
    out = {
        "n": len(o["pred"]),
        "recall": _share(o["out_of_scope"]),
        "not_routed": _share(~o["accepted"]),
        "by_classifier": _share(o["by_classifier"]),
        "by_distance": _share(o["by_distance"]),
        "only_by_distance": _share(o["by_distance"] & ~o["by_classifier"]),
        "below_threshold": _share(o["below"]),
    }
    if low_signal is not None:
        ls = np.asarray(low_signal, dtype=bool)
        out["not_routed_with_guardrail"] = _share(~o["accepted"] | ls)
    return out


def scope_metrics(
    y: np.ndarray,
    labels: Sequence[str],
    tau: float,
    distance_threshold: float | None,
    decided: dict[str, np.ndarray],
    oos_decided: dict[str, np.ndarray] | None = None,
    oos_low_signal: Sequence[bool] | None = None,
) -> dict:
    """In-scope and out-of-scope behaviour as routed: labelled rows split by their label, plus an
    unlabelled out-of-scope file; precision of the out-of-scope calls over the labelled rows.
    ``decided`` / ``oos_decided``: what the router did with each message (eval.metrics.routed.decided_outcomes)."""
    y = np.asarray(y, dtype=int)
    o = decided
    is_oos, is_cont = _reserved_rows(y, labels)
    ins = ~is_oos & ~is_cont
    part = {k: v[ins] for k, v in o.items()}
    section: dict = {
        "tau": _r(tau, 4),
        "distance_threshold": _r(distance_threshold) if distance_threshold is not None else None,
        "in_scope": in_scope_summary(part, y[ins]),
        "continuation": None,
        "out_of_scope": None,
        "oos_file": None,
        "precision": None,
    }
    if is_cont.any():  # continuations routed alone: they should be read as continuations, not routed
        cont_col = list(labels).index(CONTINUATION)
        c = {k: v[is_cont] for k, v in o.items()}
        section["continuation"] = {
            "n": int(is_cont.sum()),
            "called_continuation": _share(c["pred"] == cont_col),
            "called_out_of_scope": _share(c["out_of_scope"]),
            "not_routed": _share(~c["accepted"]),
        }
    if is_oos.any():
        section["out_of_scope"] = out_of_scope_summary({k: v[is_oos] for k, v in o.items()})
    called = o["out_of_scope"]
    if called.any() and is_oos.any():
        section["precision"] = _r(float(is_oos[called].mean()))
    if oos_decided is not None and len(oos_decided["pred"]):
        section["oos_file"] = out_of_scope_summary(oos_decided, oos_low_signal)
    return section


def scope_sweep(
    probs: np.ndarray,
    y: np.ndarray,
    labels: Sequence[str],
    taus: Sequence[float],
    distance: np.ndarray | None = None,
    distance_threshold: float | None = None,
) -> list[dict]:
    """Per tau: in-scope accepted share / accuracy / called out of scope, out-of-scope not routed."""
    y = np.asarray(y, dtype=int)
    is_oos, is_cont = _reserved_rows(y, labels)
    ins = ~is_oos & ~is_cont
    rows = []
    for tau in sorted({round(float(t), 4) for t in taus}):
        o = outcomes(probs, labels, tau, distance, distance_threshold)
        summary = in_scope_summary({k: v[ins] for k, v in o.items()}, y[ins])
        rows.append(
            {
                "tau": _r(tau, 4),
                "in_scope_accepted_share": summary["accepted_share"],
                "in_scope_accepted_accuracy": summary["accepted_accuracy"],
                "in_scope_called_out_of_scope": summary["called_out_of_scope"],
                "out_of_scope_not_routed": _share(~o["accepted"][is_oos]) if is_oos.any() else None,
            }
        )
    return rows


def _reserved_rows(y: np.ndarray, labels: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(rows labelled OUT_OF_SCOPE, rows labelled CONTINUATION): neither is in scope."""
    labels = list(labels)
    oos = y == labels.index(OUT_OF_SCOPE) if OUT_OF_SCOPE in labels else np.zeros(len(y), bool)
    cont = y == labels.index(CONTINUATION) if CONTINUATION in labels else np.zeros(len(y), bool)
    return oos, cont
