"""Speed benchmark: the ONNX router (int8, fp32) beside a reference predictor (SetFit PyTorch), in one process.

Latency is wall time of one call per message (route() for the router, predict_proba([text]) for
the reference), after warm-up; throughput is messages per second through batched calls.
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

from eval.latency import time_batches, time_calls


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


def _throughput(fn: Callable[[list[str]], object], texts: Sequence[str], batch_size: int) -> float:
    n, seconds = time_batches(fn, texts, batch_size, min_seconds=1.0, warmup=True)
    return n / seconds


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
    single = time_calls(lambda t: router.route(t, role), texts, warmup)
    tput = _throughput(lambda b: router.route_batch(b, role), texts, batch_size)
    return {
        "name": f"router onnx {variant}",
        "load_s": load_s,
        **_percentiles(single),
        "batch_msgs_per_s": tput,
        "batch_size": batch_size,
        "rss_added_mb": _rss_mb() - rss0,
    }


def bench_predictor(
    name: str, load: Callable[[], object], texts: Sequence[str], batch_size: int = 64, warmup: int = 20
) -> dict:
    """Any Predictor, opened by ``load()`` (timed): ``predict_proba([text])`` latency and batch throughput."""
    gc.collect()
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    predictor = load()
    load_s = time.perf_counter() - t0
    single = time_calls(lambda t: predictor.predict_proba([t]), texts, warmup)
    tput = _throughput(predictor.predict_proba, texts, batch_size)
    return {
        "name": name,
        "load_s": load_s,
        **_percentiles(single),
        "batch_msgs_per_s": tput,
        "batch_size": batch_size,
        "rss_added_mb": _rss_mb() - rss0,
    }


def run_speed_benchmark(
    model_dir: str | Path,
    texts: Sequence[str],
    reference: tuple[str, Callable[[], object]] | None = None,
    variants: Sequence[str] = ("int8", "fp32"),
    batch_size: int = 64,
    threads: int | None = None,
    report: Callable[[str], None] = print,
) -> dict:
    """Benchmark every exported variant on the same messages, and ``reference`` (a name and a loader of a
    Predictor, e.g. SetFit PyTorch opened by the training side) if given; ratios are against the reference."""
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
    if reference is not None:
        report(f"benchmarking {reference[0]} ...")
        rows.append(bench_predictor(reference[0], reference[1], texts, batch_size=batch_size))
    ref = rows[-1] if reference is not None else None
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


def table_rows(result: dict) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a speed benchmark result, for a terminal table."""
    header = [
        "backend",
        "load s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "batch msg/s",
        "RSS +MB",
        "p50 speed-up",
        "tput ratio",
    ]
    rows = [
        [
            r["name"],
            f"{r['load_s']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['batch_msgs_per_s']:.0f}",
            f"{r['rss_added_mb']:.0f}",
            f"{r['speedup_p50_vs_setfit']:.1f}x" if "speedup_p50_vs_setfit" in r else "-",
            f"{r['throughput_vs_setfit']:.1f}x" if "throughput_vs_setfit" in r else "-",
        ]
        for r in result["rows"]
    ]
    return header, rows
