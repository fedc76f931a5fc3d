"""Verifier lift: on the messages the classifier is not confident about (confidence < tau), how
accurate is the classifier's own top-1 compared with the verifier's answer?

A verifier failure (``VerifierError`` or any exception, or an intent outside the model's) is what the
router turns into the fallback: it counts as wrong in ``verifier_accuracy`` and is left out of
``verifier_accuracy_answered``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from eval.metrics.latency import percentiles
from eval.metrics.predictors import classification_from_probs
from router.intents import answers_of
from router.verifier import Verifier, VerifierError


def verifier_lift(
    verifier: Verifier,
    texts: Sequence[str],
    y: Sequence[int],
    probs: np.ndarray,
    labels: Sequence[str],
    tau: float,
    max_messages: int | None = None,
    describe: str | None = None,
) -> dict:
    probs, y = np.asarray(probs, dtype=np.float64), np.asarray(y, dtype=int)
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    below = np.flatnonzero(conf < tau)
    if max_messages is not None:
        below = below[:max_messages]
    clf_correct = verifier_correct = answered = 0
    failures: dict[str, int] = {}
    times = []
    for i in below:
        c = classification_from_probs(labels, probs[i])
        t0 = time.perf_counter()
        try:
            res = verifier.verify(texts[i], c, None)
            intent = res.intent if res.intent in answers_of(labels) else None  # OUT_OF_SCOPE is valid
            status = "ok" if intent is not None else "invalid_intent"
        except VerifierError as e:
            intent, status = None, e.status or "error"
        except Exception as e:  # a third-party verifier must not stop the evaluation
            intent, status = None, f"error:{type(e).__name__}"
        times.append((time.perf_counter() - t0) * 1000)
        clf_correct += int(pred[i] == y[i])
        if intent is None:
            failures[status] = failures.get(status, 0) + 1
            continue
        answered += 1
        verifier_correct += int(intent == labels[y[i]])
    n = len(below)
    clf_acc = clf_correct / n if n else None
    ver_acc = verifier_correct / n if n else None
    # End to end: accepted messages keep the classifier's label, the rest get the verifier's.
    accepted = conf >= tau
    total_correct = int((pred[accepted] == y[accepted]).sum()) + verifier_correct
    return {
        "verifier": describe or type(verifier).__name__,
        "tau": round(float(tau), 4),
        "n_below": int((conf < tau).sum()),
        "n_verified": int(n),
        "classifier_accuracy": _r(clf_acc),
        "verifier_accuracy": _r(ver_acc),
        "lift": _r(ver_acc - clf_acc) if n else None,
        "answered": answered,
        "failed": int(n - answered),
        "failures": failures,
        "verifier_accuracy_answered": _r(verifier_correct / answered) if answered else None,
        # Only meaningful when every below-tau message was verified (no max_messages cut).
        "end_to_end_accuracy": _r(total_correct / len(y))
        if n == int((conf < tau).sum()) and len(y)
        else None,
        "latency": percentiles(times),
    }


def _r(x):
    return None if x is None else round(float(x), 6)
