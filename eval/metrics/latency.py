"""Latency: the one timer (``time_calls``, ``time_batches``, ``time_batches_paired``), percentiles, and a predictor's latency report."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import numpy as np

from eval.metrics.classifier_metrics import rounded as _r

DEFAULT_SAMPLES = 300
DEFAULT_BATCH = 64
WARMUP = 3


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


def sample_evenly(texts: Sequence[str], k: int) -> list[str]:
    """Up to ``k`` texts spread evenly over the data (deterministic)."""
    texts = list(texts)
    if k <= 0 or not texts:
        return []
    if len(texts) <= k:
        return texts
    return [texts[i] for i in np.linspace(0, len(texts) - 1, k).round().astype(int)]


def time_calls(fn: Callable[[str], object], texts: Sequence[str], warmup: int = WARMUP) -> list[float]:
    """Milliseconds of one ``fn(text)`` call per text, after ``warmup`` untimed calls. The one latency timer."""
    for t in texts[:warmup]:
        fn(t)
    out = []
    for t in texts:
        t0 = time.perf_counter()
        fn(t)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def time_batches(
    fn: Callable[[list[str]], object],
    texts: Sequence[str],
    batch_size: int = DEFAULT_BATCH,
    min_seconds: float = 0.0,
    warmup: bool = False,
) -> tuple[int, float]:
    """(messages, seconds) of ``fn`` over ``texts`` in batches; passes repeat until ``min_seconds``."""
    n, (seconds,) = time_batches_paired([fn], texts, batch_size, min_seconds, warmup)
    return n, seconds


def time_batches_paired(
    fns: Sequence[Callable[[list[str]], object]],
    texts: Sequence[str],
    batch_size: int = DEFAULT_BATCH,
    min_seconds: float = 0.0,
    warmup: bool = False,
) -> tuple[int, list[float]]:
    """(messages, seconds of each fn): every batch goes through each of ``fns`` in turn, so on a host whose
    speed drifts their difference is still what one adds to the other; passes repeat until the summed
    seconds reach ``min_seconds``."""
    if warmup:
        for fn in fns:
            fn(list(texts[:batch_size]))
    n, seconds = 0, [0.0] * len(fns)
    while True:
        for i in range(0, len(texts), batch_size):
            chunk = list(texts[i : i + batch_size])
            for k, fn in enumerate(fns):
                t0 = time.perf_counter()
                fn(chunk)
                seconds[k] += time.perf_counter() - t0
            n += len(chunk)
        if sum(seconds) >= min_seconds or not texts:
            return n, seconds


def measure_latency(
    predictor, texts: Sequence[str], max_samples: int = DEFAULT_SAMPLES, batch_size: int = DEFAULT_BATCH
) -> dict:
    """``single``: wall time of ``predictor.predict_proba([text])`` per message (p50/p95/p99 in ms) over up
    to ``max_samples`` messages after a short warm-up; ``batch``: messages per second classifying those
    messages in batches of ``batch_size``."""
    sample = sample_evenly(texts, max_samples)
    if not sample:
        return {
            "single": percentiles([]),
            "batch": {"n": 0, "batch_size": batch_size, "seconds": None, "messages_per_second": None},
        }
    times = time_calls(lambda t: predictor.predict_proba([t]), sample)
    n, seconds = time_batches(predictor.predict_proba, sample, batch_size)
    return {
        "single": percentiles(times),
        "batch": {
            "n": n,
            "batch_size": batch_size,
            "seconds": round(seconds, 4),
            "messages_per_second": round(n / seconds, 2) if seconds > 0 else None,
        },
    }
