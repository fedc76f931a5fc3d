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

from eval.metrics.latency import time_batches, time_batches_paired, time_calls


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
    variant: str | None = None,
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
    # route_batch and the classifier alone (tokenize + ONNX) take the same batches in turn, so the router's
    # overhead is their difference in the same moments, not two throughputs measured a second apart
    n, (route_s, graph_s) = time_batches_paired(
        [lambda b: router.route_batch(b, role), router.classifier.predict],
        texts,
        batch_size,
        min_seconds=2.0,
        warmup=True,
    )
    tput, graph = n / route_s, n / graph_s
    # the calls whose clauses were classified ran the graph twice (router.compound.clause_floor), unless the
    # model reads them in context: they are what p95 and p99 measure, so the share and the p99 of the
    # other calls are reported beside them
    second = not router.classifier.clauses_in_context
    twice = [second and bool(c.clauses) for c in router.classifier.classify_batch(list(texts))]
    once = [ms for ms, read in zip(single, twice, strict=True) if not read]
    return {
        "name": f"router onnx {router.classifier.variant}",  # the default graph's when variant is None
        "load_s": load_s,
        **_percentiles(single),
        "read_twice_share": sum(twice) / len(twice) if twice else 0.0,
        "p99_ms_one_run": _percentiles(once)["p99_ms"] if once else None,
        "batch_msgs_per_s": tput,
        "classifier_msgs_per_s": graph,
        # what route_batch adds per message over the classifier alone: reading the clauses, resolving the
        # compound intents, the guardrail, the decision stages and RBAC
        "router_overhead_ms": max(0.0, (route_s - graph_s) * 1000 / n),
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


# the speed goals of the default (int8) router (about a millisecond a message on a CPU), checked on
# the median of the runs
GOALS = {
    "p50_ms": 1.0,
    "p99_ms": 2.0,
    "speedup_p50_vs_setfit": 8.0,
    "batch_msgs_per_s": 1500.0,
    "router_overhead_ms": 0.1,
}
# the goals a row meets from above (>=); the others are upper limits (<=)
_AT_LEAST = ("speedup_p50_vs_setfit", "batch_msgs_per_s")
_SPREAD = ("p50_ms", "p99_ms", "batch_msgs_per_s", "router_overhead_ms")


def _median_row(runs: list[dict]) -> dict:
    """One row from the same backend's runs: the median of every number, and min/max of the key ones."""
    row = dict(runs[0])
    for k, v in runs[0].items():
        if isinstance(v, float):
            row[k] = statistics.median(r[k] for r in runs)
    row["runs"] = len(runs)
    row["spread"] = {k: [min(r[k] for r in runs), max(r[k] for r in runs)] for k in _SPREAD if k in row}
    return row


def check_goals(row: dict) -> dict[str, bool]:
    """Which of GOALS a router row meets (``>=`` for speed-up and throughput, ``<=`` for times)."""
    return {
        k: (row[k] >= bound if k in _AT_LEAST else row[k] <= bound) for k, bound in GOALS.items() if k in row
    }


def run_speed_benchmark(
    model_dir: str | Path,
    texts: Sequence[str],
    reference: tuple[str, Callable[[], object]] | None = None,
    variants: Sequence[str] = ("int8", "fp16", "fp32"),
    batch_size: int = 64,
    threads: int | None = None,
    report: Callable[[str], None] = print,
    runs: int = 3,
    compare: Sequence[str | Path] = (),
    reference_model: str | None = None,
) -> dict:
    """Benchmark every exported variant on the same messages, the default graph's router of each model in
    ``compare`` (e.g. the default and the fast model: on a host whose speed drifts, only an interleaved
    comparison is a fair one), and ``reference`` (a name and a loader of a Predictor, e.g. SetFit PyTorch opened by the
    training side) if given, ``runs`` times interleaved; each row is the median of the runs with the
    spread; ratios are against the reference, whose model id is ``reference_model`` (default: this
    model's)."""
    from router.manifest import load_manifest

    others = [(Path(d), load_manifest(d).model_id) for d in compare]  # fail before any timing

    model_dir = Path(model_dir)
    manifest = load_manifest(model_dir)
    present = _runnable_variants(model_dir, manifest, variants, report)
    timing = dict(batch_size=batch_size, threads=threads, report=report)
    per_run = [
        _one_run(run, runs, model_dir, texts, present, others, reference, **timing)
        for run in range(max(1, runs))
    ]
    rows = [_median_row([run[i] for run in per_run]) for i in range(len(per_run[0]))]
    for r in rows:
        if r["name"].startswith("router onnx"):
            r["goals"] = check_goals(r)
    return {
        "model": manifest.model_id,
        "reference_model": (reference_model or manifest.model_id) if reference is not None else None,
        "messages": len(texts),
        "mean_words": statistics.fmean(len(t.split()) for t in texts) if texts else 0,
        "int8_recipe": (manifest.export.variants["int8"].recipe if "int8" in present else None),
        "default_variant": manifest.export.default_variant if manifest.export else None,
        "machine": _machine(),
        "rows": rows,
    }


def _runnable_variants(model_dir: Path, manifest, variants: Sequence[str], report) -> list[str]:
    """The ``variants`` the model has on disk and whose parity passed at export; says why of the others."""
    present = [
        v
        for v in variants
        if manifest.export
        and v in manifest.export.variants
        and (model_dir / manifest.export.variants[v].file.path).is_file()
    ]
    for v in set(variants) - set(present):
        report(f"skipping onnx {v}: not in {model_dir}")
    failed = [v for v in present if (p := manifest.export.variants[v].parity) is not None and not p.passed]
    for v in failed:
        report(f"skipping onnx {v}: it failed its parity check at export")
    return [v for v in present if v not in failed]


def _one_run(
    run, runs, model_dir, texts, present, others, reference, *, batch_size, threads, report
) -> list[dict]:
    """One interleaved run: each variant's router, each compared model's, then the reference, with the
    ratios against the reference."""
    rows = []
    for v in present:
        report(f"run {run + 1}/{runs}: router onnx {v} ...")
        rows.append(bench_router(model_dir, texts, v, batch_size=batch_size, threads=threads))
    for other, other_id in others:
        report(f"run {run + 1}/{runs}: router onnx of {other} (its default graph) ...")
        row = bench_router(other, texts, None, batch_size=batch_size, threads=threads)
        rows.append({**row, "name": f"{row['name']}: {other.name}", "model": other_id})
    if reference is not None:
        report(f"run {run + 1}/{runs}: {reference[0]} ...")
        rows.append(bench_predictor(reference[0], reference[1], texts, batch_size=batch_size))
    ref = rows[-1] if reference is not None else None
    for r in rows if ref else ():
        r["speedup_p50_vs_setfit"] = ref["p50_ms"] / r["p50_ms"]
        r["throughput_vs_setfit"] = r["batch_msgs_per_s"] / ref["batch_msgs_per_s"]
    return rows


def _machine() -> dict:
    from eval.bench.cpu import cpu_name

    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu": cpu_name(),
        "python": platform.python_version(),
        "load_avg": os.getloadavg() if hasattr(os, "getloadavg") else None,
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
        "overhead ms",
        "2 runs",
        "p99 1 run",
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
            f"{r['batch_msgs_per_s']:.0f}"
            + (
                f" ({r['spread']['batch_msgs_per_s'][0]:.0f}-{r['spread']['batch_msgs_per_s'][1]:.0f})"
                if "spread" in r and r.get("runs", 1) > 1
                else ""
            ),
            f"{r['router_overhead_ms']:.3f}" if "router_overhead_ms" in r else "-",
            f"{r['read_twice_share']:.1%}" if "read_twice_share" in r else "-",
            f"{r['p99_ms_one_run']:.2f}" if r.get("p99_ms_one_run") is not None else "-",
            f"{r['rss_added_mb']:.0f}",
            f"{r['speedup_p50_vs_setfit']:.1f}x" if "speedup_p50_vs_setfit" in r else "-",
            f"{r['throughput_vs_setfit']:.1f}x" if "throughput_vs_setfit" in r else "-",
        ]
        for r in result["rows"]
    ]
    return header, rows


def comparison_lines(result: dict) -> list[str]:
    """One line per compared model: how much faster (> 1) or slower its default graph's router ran than
    the benchmarked model's default one, at p50, p99 and in batches, from the medians of the same rounds.
    And, when both graphs were timed, the int8 router against the fp32 one on this CPU: without VNNI, int8
    can lose (docs/speed.md)."""
    rows = [r for r in result["rows"] if r["name"].startswith("router onnx")]
    default = result.get("default_variant") or "int8"
    main = next((r for r in rows if r["name"] == f"router onnx {default}"), None)
    if main is None:
        return []
    out = [
        f"{r['name'].split(': ', 1)[1]} against {result['model']}: p50 {main['p50_ms'] / r['p50_ms']:.2f}x, "
        f"p99 {main['p99_ms'] / r['p99_ms']:.2f}x, batches {r['batch_msgs_per_s'] / main['batch_msgs_per_s']:.2f}x "
        "(> 1: faster)"
        for r in rows
        if ": " in r["name"]
    ]
    fp32 = next((r for r in rows if r["name"] == "router onnx fp32"), None)
    int8 = next((r for r in rows if r["name"] == "router onnx int8"), None)
    if fp32 is not None and int8 is not None:
        p50, batches = fp32["p50_ms"] / int8["p50_ms"], int8["batch_msgs_per_s"] / fp32["batch_msgs_per_s"]
        cpu = (result.get("machine") or {}).get("cpu") or "this CPU"
        advice = "; fp32 is faster here: Router.load(..., variant='fp32')" if p50 < 1 and batches < 1 else ""
        out.append(
            f"int8 against fp32 on {cpu}: p50 {p50:.2f}x, batches {batches:.2f}x (> 1: int8 faster){advice}"
        )
    return out


_GOAL_TEXT = {  # how each goal reads in goal_lines: label, value format, unit
    "p50_ms": ("p50", "{:.2f}", " ms"),
    "p99_ms": ("p99", "{:.2f}", " ms"),
    "batch_msgs_per_s": ("batches", "{:,.0f}", " msg/s"),
    "router_overhead_ms": ("overhead", "{:.3f}", " ms"),
    "speedup_p50_vs_setfit": ("p50 vs PyTorch", "{:.1f}", "x"),
}


def goal_lines(result: dict) -> list[str]:
    """One line per router row: each of the speed GOALS with the row's median and whether it is met."""
    out = []
    for r in result["rows"]:
        goals = r.get("goals") or {}
        parts = []
        for k, met in goals.items():
            label, fmt, unit = _GOAL_TEXT[k]
            ref = result.get("reference_model") or result["model"]
            if k == "speedup_p50_vs_setfit" and r.get("model", result["model"]) != ref:
                label = f"p50 vs {ref}'s PyTorch"  # against another model's PyTorch
            sign = ">=" if k in _AT_LEAST else "<="
            bound = fmt.format(GOALS[k])
            parts.append(f"{label} {fmt.format(r[k])}{unit} ({sign} {bound}: {'met' if met else 'missed'})")
        if parts:
            out.append(f"{r['name']}, speed goals: " + ", ".join(parts))
    return out
