"""Speed benchmark: the ONNX router (int8, fp32) beside SetFit's PyTorch predict_proba, in one process.

Latency is wall time of one call per message (route() for the router, predict_proba([text]) for
SetFit), after warm-up; throughput is messages per second through batched calls.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np


def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 1e6
    except ImportError:  # Linux fallback
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def _percentiles(ms: Sequence[float]) -> dict[str, float]:
    a = np.asarray(ms)
    return {
        "p50_ms": float(np.percentile(a, 50)),
        "p95_ms": float(np.percentile(a, 95)),
        "p99_ms": float(np.percentile(a, 99)),
        "mean_ms": float(a.mean()),
    }


def _time_single(fn: Callable[[str], object], texts: Sequence[str], warmup: int) -> list[float]:
    for t in texts[:warmup]:
        fn(t)
    out = []
    for t in texts:
        t0 = time.perf_counter()
        fn(t)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def _throughput(
    fn: Callable[[list[str]], object], texts: Sequence[str], batch_size: int, min_seconds: float = 1.0
) -> float:
    fn(list(texts[:batch_size]))  # warm-up
    n, t0 = 0, time.perf_counter()
    while True:
        for i in range(0, len(texts), batch_size):
            chunk = list(texts[i : i + batch_size])
            fn(chunk)
            n += len(chunk)
        elapsed = time.perf_counter() - t0
        if elapsed >= min_seconds:
            return n / elapsed


def bench_router(
    model_dir: str | Path,
    texts: Sequence[str],
    variant: str = "int8",
    role: str = "admin",
    batch_size: int = 64,
    warmup: int = 20,
    threads: int | None = None,
) -> dict:
    from router.routing import Router

    gc.collect()
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    router = Router.load(model_dir, variant=variant, intra_op_threads=threads)
    load_s = time.perf_counter() - t0
    single = _time_single(lambda t: router.route(t, role), texts, warmup)
    tput = _throughput(lambda b: router.route_batch(b, role), texts, batch_size)
    return {
        "name": f"router onnx {variant}",
        "load_s": load_s,
        **_percentiles(single),
        "batch_msgs_per_s": tput,
        "batch_size": batch_size,
        "rss_added_mb": _rss_mb() - rss0,
    }


def bench_setfit(
    checkpoint: str | Path, texts: Sequence[str], batch_size: int = 64, warmup: int = 20
) -> dict:
    import torch

    from training.train import load_setfit

    gc.collect()
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    model = load_setfit(checkpoint)
    load_s = time.perf_counter() - t0
    with torch.inference_mode():
        single = _time_single(lambda t: model.predict_proba([t]), texts, warmup)
        tput = _throughput(lambda b: model.predict_proba(b, batch_size=batch_size), texts, batch_size)
    return {
        "name": "setfit pytorch predict_proba",
        "load_s": load_s,
        **_percentiles(single),
        "batch_msgs_per_s": tput,
        "batch_size": batch_size,
        "rss_added_mb": _rss_mb() - rss0,
        "torch_threads": torch.get_num_threads(),
    }


def run_speed_benchmark(
    model_dir: str | Path,
    texts: Sequence[str],
    include_torch: bool = True,
    variants: Sequence[str] = ("int8", "fp32"),
    batch_size: int = 64,
    threads: int | None = None,
    report: Callable[[str], None] = print,
) -> dict:
    """Benchmark every available backend on the same messages; ratios are against SetFit PyTorch."""
    from router.manifest import load_manifest

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    rows = []
    for v in variants:
        if (
            manifest.export
            and v in manifest.export.variants
            and (model_dir / manifest.export.variants[v].file.path).is_file()
        ):
            report(f"benchmarking router onnx {v} ...")
            rows.append(bench_router(model_dir, texts, v, batch_size=batch_size, threads=threads))
        else:
            report(f"skipping onnx {v}: not in {model_dir}")
    ckpt = model_dir / manifest.training.get("checkpoint", "checkpoint")
    if include_torch:
        if ckpt.is_dir():
            report("benchmarking setfit pytorch ...")
            rows.append(bench_setfit(ckpt, texts, batch_size=batch_size))
        else:
            report(f"skipping setfit pytorch: no checkpoint at {ckpt} (train the model to compare)")
    ref = next((r for r in rows if r["name"].startswith("setfit")), None)
    if ref:
        for r in rows:
            r["speedup_p50_vs_setfit"] = ref["p50_ms"] / r["p50_ms"]
            r["throughput_vs_setfit"] = r["batch_msgs_per_s"] / ref["batch_msgs_per_s"]
    return {
        "model": manifest.model_id,
        "messages": len(texts),
        "mean_words": statistics.fmean(len(t.split()) for t in texts) if texts else 0,
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(),
        },
        "rows": rows,
    }
