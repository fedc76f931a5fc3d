"""Public intent benchmarks: a runner that trains one SetFit model per seed (training.benchmarks.seed, the
same fitting code as ``training.fit.train``) and reports test accuracy as mean and spread over seeds. The
dataset readers and k-shot sampling are in ``training.benchmarks.public_data``.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from training.benchmarks.public_data import BENCHMARKS, data_files, read_benchmark
from training.benchmarks.seed import DEFAULT_IN_SCOPE_FLOOR, seed_run

Reporter = Callable[[str], None]


# ------------------------------------------------------------------------------------ runner
def _spread(values: Sequence[float]) -> dict:
    v = np.asarray(values, dtype=np.float64)
    return {
        "mean": float(v.mean()),
        "std": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
        "min": float(v.min()),
        "max": float(v.max()),
        "n": len(v),
    }


def summarize(runs: list[dict]) -> dict:
    out = {
        "accuracy": _spread([r["test"]["accuracy"] for r in runs]),
        "macro_f1": _spread([r["test"]["macro_f1"] for r in runs]),
        "seconds_per_seed": _spread([r["seconds"]["total"] for r in runs]),
    }
    if runs and all("oos" in r for r in runs):
        out["in_scope_accuracy_at_tau"] = _spread([r["oos"]["test_in_scope_accuracy"] for r in runs])
        out["oos_recall"] = _spread([r["oos"]["test_oos_recall"] for r in runs])
        out["tau"] = _spread([r["oos"]["tau"] for r in runs])
    if runs and all("oos_class" in r for r in runs):
        out["extra_class"] = {
            k: _spread([r["oos_class"]["extra_class"][k] for r in runs])
            for k in ("in_scope_accuracy", "oos_recall")
        }
        if all("with_distance" in r["oos_class"] for r in runs):
            out["extra_class_with_distance"] = {
                k: _spread([r["oos_class"]["with_distance"][k] for r in runs])
                for k in ("in_scope_accuracy", "oos_recall", "oos_only_by_distance")
            }
    chosen = [
        r["oos_class"].get("operating_points", {}).get("chosen_on_val") for r in runs if "oos_class" in r
    ]
    if runs and len(chosen) == len(runs) and all(chosen):
        out["operating_point_on_val"] = {
            "in_scope_floor": runs[0]["oos_class"]["operating_points"]["in_scope_floor"],
            **{k: _spread([c[k] for c in chosen]) for k in ("keep", "tau")},
            **{k: _spread([c["test"][k] for c in chosen]) for k in ("in_scope_accuracy", "oos_recall")},
        }
    if runs and all("oos_pooled" in r for r in runs):
        out["pooled_threshold"] = {
            "in_scope_accuracy_at_tau": _spread([r["oos_pooled"]["test_in_scope_accuracy"] for r in runs]),
            "oos_recall": _spread([r["oos_pooled"]["test_oos_recall"] for r in runs]),
            "tau": _spread([r["oos_pooled"]["tau"] for r in runs]),
        }
    return out


def _torch_threads() -> int | None:
    try:
        import torch

        return int(torch.get_num_threads())
    except ImportError:  # pragma: no cover
        return None


def run_benchmark(
    name: str,
    path: str | Path,
    shots: int | None = 10,
    seeds: int | Sequence[int] = 3,
    max_steps: int | None = None,
    batch_size: int | None = None,
    base_model: str | None = None,
    report: Reporter = print,
    show_progress: bool = False,
    out: str | Path | None = None,
    command: str | None = None,
    oos_class: bool = False,
    in_scope_floor: float = DEFAULT_IN_SCOPE_FLOOR,
    **train_options,
) -> dict:
    """Train and evaluate one SetFit model per seed on a public benchmark; return the results dict.

    ``shots`` None or 0 trains on the full train split. ``seeds`` is a count (seeds 0..n-1) or the seeds
    themselves; each seed draws the k-shot sample and seeds training. ``max_steps``, ``batch_size``,
    ``base_model`` and ``train_options`` (any other ``TrainConfig`` field, e.g. ``head_c``) override the
    ``TrainConfig`` defaults. ``oos_class`` (CLINC150) trains oos_train as an out-of-scope class and
    reports in-scope accuracy and out-of-scope recall with it, and with the in-scope distance on top, and
    the operating point chosen on val for ``in_scope_floor`` (training.benchmarks.seed._operating_points).
    With ``out`` the results JSON is written there after every seed (so a long run keeps its progress)
    and at the end, with ``command`` (the command line) recorded."""
    from eval.reports.report_files import write_json
    from training.libraries import quiet_libraries
    from training.train_config import TrainConfig

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if name not in BENCHMARKS:
        raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")
    shots = shots or None
    seed_list = list(range(seeds)) if isinstance(seeds, int) else [int(s) for s in seeds]
    if not seed_list:
        raise ValueError("need at least one seed")
    if oos_class and name != "clinc150":
        raise ValueError("oos_class needs a benchmark with out-of-scope training rows (clinc150)")
    splits = read_benchmark(name, path)
    overrides = {"max_steps": max_steps, "batch_size": batch_size, "base_model": base_model, **train_options}
    base_cfg = TrainConfig(name=f"bench-{name}", **{k: v for k, v in overrides.items() if v is not None})
    quiet_libraries()

    result = _result_head(name, path, splits, shots, oos_class, seed_list, base_cfg)
    t0 = time.perf_counter()
    for seed in seed_list:
        cfg = base_cfg.model_copy(update={"seed": seed})
        result["runs"].append(
            seed_run(name, splits, shots, seed, cfg, report, show_progress, oos_class, in_scope_floor)
        )
        result["summary"] = summarize(result["runs"])
        result["seconds_total"] = round(time.perf_counter() - t0, 2)
        if out is not None and seed != seed_list[-1]:
            write_json({"command": command, **result}, out)
    result["complete"] = True
    if out is not None:
        write_json({"command": command, **result}, out)
    return result


def _protocol(name: str, shots: int | None, oos_class: bool) -> str:
    """How a run samples, fits and scores, in words, for the results file."""
    sample = f"{shots} rows per class sampled from train with each seed" if shots else "full train split"
    if oos_class:
        fitted = (
            "; oos_train trained as an out-of-scope class (and oos_val in val); temperature and in-scope distance "
            "threshold fitted on val; arg-max on test + oos_test, with and without the distance"
        )
    elif name == "clinc150":
        fitted = "; temperature fitted on val; out-of-scope threshold chosen on val + oos_val, applied to test + oos_test"
    else:
        fitted = "; no val split, so no temperature (T = 1)"
    return sample + "; accuracy on the full test split" + fitted


def _result_head(name, path, splits, shots, oos_class, seed_list, base_cfg) -> dict:
    """The results dict before any seed has run: the data's files and sizes, the protocol, the
    hyperparameters, the package versions and the machine."""
    from router.manifest import package_versions, sha256_file
    from training.fit.train import VERSIONED_PACKAGES

    return {
        "benchmark": name,
        "path": str(path),
        "data": {
            "files": {str(f): sha256_file(f) for f in data_files(name, path)},
            "rows": {k: len(v) for k, v in splits.items()},
            "classes": len(splits["train"].classes),
        },
        "shots": shots,
        "protocol": _protocol(name, shots, oos_class),
        "oos_class": oos_class,
        "seeds": seed_list,
        "hyperparameters": base_cfg.model_dump(
            mode="json", exclude={"name", "train_file", "dev_file", "test_file", "seed"}
        ),
        "versions": package_versions(VERSIONED_PACKAGES),
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads": _torch_threads(),
            "platform": platform.platform(),
            "processor": platform.processor() or None,
        },
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "complete": False,
        "runs": [],
    }


def format_summary(result: dict) -> list[tuple[str, str]]:
    """(metric, 'mean ± std (min-max)') rows in percent, for printing and docs."""
    s = result["summary"]

    def pct(d: dict) -> str:
        return f"{100 * d['mean']:.2f} ± {100 * d['std']:.2f} ({100 * d['min']:.2f}-{100 * d['max']:.2f})"

    rows = [("accuracy %", pct(s["accuracy"])), ("macro-F1 %", pct(s["macro_f1"]))]
    if "oos_recall" in s:
        rows += [
            ("in-scope accuracy at tau %", pct(s["in_scope_accuracy_at_tau"])),
            ("out-of-scope recall %", pct(s["oos_recall"])),
            ("tau (chosen on val, balanced)", f"{s['tau']['mean']:.3f} ± {s['tau']['std']:.3f}"),
        ]
    if "pooled_threshold" in s:
        q = s["pooled_threshold"]
        rows += [
            ("pooled tau: in-scope accuracy %", pct(q["in_scope_accuracy_at_tau"])),
            ("pooled tau: out-of-scope recall %", pct(q["oos_recall"])),
            ("tau (chosen on val, pooled)", f"{q['tau']['mean']:.3f} ± {q['tau']['std']:.3f}"),
        ]
    for key, name in (
        ("extra_class", "extra class"),
        ("extra_class_with_distance", "extra class + distance"),
    ):
        if key in s:
            rows += [
                (f"{name}: in-scope accuracy %", pct(s[key]["in_scope_accuracy"])),
                (f"{name}: out-of-scope recall %", pct(s[key]["oos_recall"])),
            ]
    if "operating_point_on_val" in s:
        q = s["operating_point_on_val"]
        floor = f"val in-scope >= {100 * q['in_scope_floor']:.0f}%"
        rows += [
            (f"operating point ({floor}): in-scope accuracy %", pct(q["in_scope_accuracy"])),
            (f"operating point ({floor}): out-of-scope recall %", pct(q["oos_recall"])),
            ("operating point: keep, tau", f"{q['keep']['mean']:.2f}, {q['tau']['mean']:.2f}"),
        ]
    rows.append(
        ("seconds per seed", f"{s['seconds_per_seed']['mean']:.0f} ± {s['seconds_per_seed']['std']:.0f}")
    )
    return rows
