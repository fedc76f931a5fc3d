"""Thresholds per intent, fitted for a target precision of the messages the router accepts.

The router accepts a message as intent k when k is the classifier's top label and its calibrated
confidence reaches k's threshold (router config ``thresholds``, else the global ``threshold``). For each
intent, ``fit_intent_thresholds`` takes the lowest threshold on a grid at which the messages accepted as
k are k in at least ``target`` of cases (``precision``), and reports it beside the global threshold:
``coverage`` is the share of the messages whose top label is k that are accepted (the rest go to the
verifier or the fallback). Fit on dev and check on test: a threshold fitted on the split it is scored on
flatters itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from eval.metrics.classifier_metrics import rounded as _r
from router.intents import intents_of

FIT_GRID = tuple(round(0.30 + 0.01 * i, 2) for i in range(70))  # 0.30 ... 0.99
MIN_ACCEPTED = 5  # a threshold judged on fewer accepted messages is noise


def acceptance(probs: np.ndarray, y: np.ndarray, index: int, tau: float) -> dict:
    """Messages whose top label is ``index``: how many, the share accepted at ``tau`` and the precision of
    the accepted ones (None when none is accepted)."""
    top = probs.argmax(axis=1) == index
    accepted = top & (probs.max(axis=1) >= tau)
    n, k = int(top.sum()), int(accepted.sum())
    right = int((accepted & (y == index)).sum())
    return {
        "tau": _r(tau, 4),
        "top": n,
        "accepted": k,
        "coverage": _r(k / n) if n else None,
        "precision": _r(right / k) if k else None,
    }


def fit_intent_thresholds(
    probs: np.ndarray,
    y: Sequence[int],
    labels: Sequence[str],
    tau: float,
    target: float = 0.95,
    grid: Sequence[float] = FIT_GRID,
) -> dict:
    """Per intent of ``labels``: its threshold for ``target`` precision (the grid's top when no threshold
    reaches it: ``reached`` False), with ``before`` (at the global ``tau``) and ``after``."""
    if not 0.0 < target <= 1.0:
        raise ValueError(f"target precision must be in (0, 1], got {target}")
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=int)
    out = {}
    for name in intents_of(labels):
        j = list(labels).index(name)
        chosen, reached = grid[-1], False
        for t in grid:
            a = acceptance(probs, y, j, t)
            if a["accepted"] >= MIN_ACCEPTED and a["precision"] >= target:
                chosen, reached = t, True
                break
        out[name] = {
            "threshold": chosen,
            "reached": reached,
            "before": acceptance(probs, y, j, tau),
            "after": acceptance(probs, y, j, chosen),
        }
    return {"target_precision": target, "tau": _r(tau, 4), "per_intent": out}


def write_config_with_thresholds(source: str | Path | None, fitted: dict, out: str | Path) -> Path:
    """Write the router config ``source`` (None: the shipped one) to ``out`` with the fitted thresholds
    of the intents whose threshold differs from the global one."""
    from router.config import RouterConfig

    config = RouterConfig.load(source)
    thresholds = {
        name: f["threshold"] for name, f in fitted["per_intent"].items() if f["threshold"] != config.threshold
    }
    return config.model_copy(update={"thresholds": thresholds}).save(out)


def markdown_lines(section: dict) -> list[str]:
    """The report's table: each intent's threshold, coverage and precision before and after."""
    lines = [
        f"Fitted for {section['target_precision']:.0%} precision of accepted messages "
        f"(global threshold {section['tau']}):",
        "",
        "| intent | threshold | coverage before | precision before | coverage after | precision after |",
        "|---|---|---|---|---|---|",
    ]
    for name, f in section["per_intent"].items():
        b, a = f["before"], f["after"]
        mark = "" if f["reached"] else " (target not reached)"
        lines.append(
            f"| {name} | {f['threshold']}{mark} | {b['coverage']} | {b['precision']} | {a['coverage']} | "
            f"{a['precision']} |"
        )
    return lines
