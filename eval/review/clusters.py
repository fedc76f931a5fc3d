"""Seeded k-means over small sets of vectors: the review queue spreads its picks over clusters of the
model's embedding (eval.review.queue), so a budget is not spent on variants of one message."""

from __future__ import annotations

import math

import numpy as np


def kmeans(x: np.ndarray, k: int, seed: int = 0, iterations: int = 50) -> np.ndarray:
    """Cluster the rows of ``x`` into at most ``k`` groups (k-means++ start, Lloyd steps, seeded); an
    emptied cluster restarts at the point farthest from its centre. Returns each row's cluster."""
    n = len(x)
    k = max(1, min(k, n))
    x = np.asarray(x, dtype=np.float64)
    rng = np.random.default_rng([seed, 1])
    chosen = [int(rng.integers(n))]
    d2 = ((x - x[chosen[0]]) ** 2).sum(1)
    for _ in range(1, k):
        total = d2.sum()
        i = int(rng.choice(n, p=d2 / total)) if total > 0 else int(rng.integers(n))
        chosen.append(i)
        d2 = np.minimum(d2, ((x - x[i]) ** 2).sum(1))
    centres = x[chosen].copy()
    labels = np.full(n, -1)
    sq = (x**2).sum(1)
    for _ in range(iterations):
        dist = sq[:, None] - 2 * x @ centres.T + (centres**2).sum(1)[None, :]
        new = dist.argmin(1)
        if (new == labels).all():
            break
        labels = new
        for j in range(k):
            members = labels == j
            centres[j] = x[members].mean(0) if members.any() else x[dist.min(1).argmax()]
    # number the clusters by their first member, so the numbers do not depend on the start
    order = {c: i for i, c in enumerate(dict.fromkeys(labels.tolist()))}
    return np.array([order[c] for c in labels.tolist()], dtype=int)


def cluster_count(n: int, budget: int) -> int:
    return max(1, min(budget, n, round(math.sqrt(n))))
