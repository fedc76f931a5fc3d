"""Latency of a predictor: single-message classification percentiles and batch throughput."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from eval.metrics import percentiles

DEFAULT_SAMPLES = 300
DEFAULT_BATCH = 64
WARMUP = 3


def sample_evenly(texts: Sequence[str], k: int) -> list[str]:
    """Up to ``k`` texts spread evenly over the data (deterministic)."""
    texts = list(texts)
    if k <= 0 or not texts:
        return []
    if len(texts) <= k:
        return texts
    return [texts[i] for i in np.linspace(0, len(texts) - 1, k).round().astype(int)]


def measure_latency(
    predictor, texts: Sequence[str], max_samples: int = DEFAULT_SAMPLES, batch_size: int = DEFAULT_BATCH
) -> dict:
    """``single``: wall time of ``predictor.classify(text)`` per message (p50/p95/p99 in ms) over up to
    ``max_samples`` messages after a short warm-up; ``batch``: messages per second classifying those
    messages in batches of ``batch_size``."""
    sample = sample_evenly(texts, max_samples)
    if not sample:
        return {
            "single": percentiles([]),
            "batch": {"n": 0, "batch_size": batch_size, "seconds": None, "messages_per_second": None},
        }
    for t in sample[:WARMUP]:
        predictor.classify(t)
    times = []
    for t in sample:
        t0 = time.perf_counter()
        predictor.classify(t)
        times.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    for i in range(0, len(sample), batch_size):
        predictor.predict_proba(sample[i : i + batch_size])
    seconds = time.perf_counter() - t0
    return {
        "single": percentiles(times),
        "batch": {
            "n": len(sample),
            "batch_size": batch_size,
            "seconds": round(seconds, 4),
            "messages_per_second": round(len(sample) / seconds, 2) if seconds > 0 else None,
        },
    }
