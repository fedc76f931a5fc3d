"""Calibration metrics over probability matrices (numpy only, shared by the training side and eval)."""

from __future__ import annotations

import numpy as np


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    z = np.asarray(logits, dtype=np.float64) / temperature
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def nll(probs: np.ndarray, y: np.ndarray) -> float:
    """Mean negative log-likelihood of the true class."""
    p = np.clip(np.asarray(probs, dtype=np.float64)[np.arange(len(y)), y], 1e-12, 1.0)
    return float(-np.log(p).mean())


def brier(probs: np.ndarray, y: np.ndarray) -> float:
    """Multi-class Brier score: mean over rows of the squared distance to the one-hot target."""
    probs = np.asarray(probs, dtype=np.float64)
    onehot = np.zeros_like(probs)
    onehot[np.arange(len(y)), y] = 1.0
    return float(((probs - onehot) ** 2).sum(axis=1).mean())


def reliability_bins(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> list[dict]:
    """Equal-width confidence bins over the top-1 probability: count, mean confidence, accuracy."""
    probs = np.asarray(probs, dtype=np.float64)
    conf = probs.max(axis=1)
    correct = probs.argmax(axis=1) == y
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = []
    for i in range(n_bins):
        lo, hi = edges[i], edges[i + 1]
        mask = (conf > lo) & (conf <= hi) if i else (conf >= lo) & (conf <= hi)
        n = int(mask.sum())
        bins.append(
            {
                "lower": float(lo),
                "upper": float(hi),
                "count": n,
                "confidence": float(conf[mask].mean()) if n else None,
                "accuracy": float(correct[mask].mean()) if n else None,
            }
        )
    return bins


def ece(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    """Expected calibration error: bin-weighted |accuracy - confidence| over equal-width bins."""
    total = len(y)
    if total == 0:
        return 0.0
    return float(
        sum(
            b["count"] / total * abs(b["accuracy"] - b["confidence"])
            for b in reliability_bins(probs, y, n_bins)
            if b["count"]
        )
    )


def summary(probs: np.ndarray, y: np.ndarray, n_bins: int = 15) -> dict[str, float]:
    probs = np.asarray(probs)
    y = np.asarray(y)
    return {
        "n": len(y),
        "accuracy": float((probs.argmax(axis=1) == y).mean()) if len(y) else 0.0,
        "ece": ece(probs, y, n_bins),
        "nll": nll(probs, y),
        "brier": brier(probs, y),
    }
