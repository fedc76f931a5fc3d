"""Public intent benchmarks: a runner that trains one SetFit model per seed (the same fitting code as
``training.train``) and reports test accuracy as mean and spread over seeds. The dataset readers and
k-shot sampling are in ``training.benchmark_data``.

Protocol (k-shot): sample k training rows per class with a fixed seed, train, evaluate on the whole
test split; repeat over seeds. A temperature is fitted on val where the dataset has one (CLINC150).
For CLINC150 the out-of-scope threshold is chosen on val (in-scope val + oos_val) only, then applied
to test + oos_test: a message is accepted when its top probability is >= tau, and an out-of-scope
message is caught when it is not accepted. With ``oos_class`` (CLINC150 only) oos_train is trained as
one more class instead (Larson et al.'s "extra class"): no threshold, arg-max on test + oos_test, and
again with the in-scope distance on top, and at the operating point (distance keep, probability tau)
chosen on val for an in-scope accuracy floor.
"""

from __future__ import annotations

import gc
import os
import platform
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from training.benchmark_data import BENCHMARKS, BenchmarkDataError, Split, data_files, k_shot, read_benchmark

Reporter = Callable[[str], None]

# --oos-class operating points (_operating_points): the distance threshold keeps `keep` of in-scope val
DEFAULT_IN_SCOPE_FLOOR = 0.92  # the out-of-scope issue's floor for CLINC150's in-scope accuracy
KEEPS = (1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.9, 0.88, 0.85)
TAUS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


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


def _seed_run(
    name: str,
    splits: dict[str, Split],
    shots: int | None,
    seed: int,
    config,
    report: Reporter,
    show_progress: bool,
    oos_class: bool = False,
    in_scope_floor: float = DEFAULT_IN_SCOPE_FLOOR,
) -> dict:
    from eval.evaluator import split_metrics
    from eval.thresholds import choose_threshold, in_scope_at_threshold
    from training.model import IntentModel

    t_start = time.perf_counter()
    train = k_shot(splits["train"], shots, seed) if shots else splits["train"]
    val_parts = (splits.get("val"), splits.get("oos_val"))  # before oos_val joins val
    if oos_class:  # Larson et al.'s "extra class": oos_train is one more class; oos_val joins val
        splits = dict(splits)
        train = _with_oos(train, splits["oos_train"])
        splits["val"] = _with_oos(splits["val"], splits["oos_val"])
    report(f"[{name} seed {seed}] training on {len(train)} rows ({len(train.classes)} classes)")
    model = IntentModel(config).fit(train.texts, train.labels, report, show_progress)
    seconds = dict(model.fit_seconds)
    t0 = time.perf_counter()

    def ids(labels: Sequence[str]) -> np.ndarray:
        try:
            return model.label_ids(labels)
        except ValueError as e:
            raise BenchmarkDataError(f"evaluation {e}") from e

    run: dict = {"seed": seed, "train_rows": len(train)}
    val = splits.get("val")
    if val is not None:
        y_val = ids(val.labels)
        run["temperature"] = model.calibrate(val.texts, val.labels)
        val_probs = model.predict_proba(val.texts)
        run["val"] = {"accuracy": float((val_probs.argmax(axis=1) == y_val).mean())}
    else:
        run["temperature"] = None  # no val split: probabilities stay uncalibrated (T = 1)

    test = splits["test"]
    y_test = ids(test.labels)
    probs, dist = model.predict_with_distance(test.texts)  # one encoding for every use of test below
    m = split_metrics(probs, y_test, model.labels)
    run["test"] = {k: m[k] for k in ("n", "accuracy", "macro_f1", "ece", "nll")}

    if oos_class:
        t_in, t_oos = (probs, dist, y_test), model.predict_with_distance(splits["oos_test"].texts)
        run["oos_class"] = _extra_class_results(model, t_in, t_oos)
        if all(p is not None for p in val_parts) and model.distance_threshold is not None:
            run["oos_class"]["operating_points"] = _operating_points(
                model, val_parts, t_in, t_oos, in_scope_floor
            )
    elif "oos_val" in splits and val is not None:
        oos_val_conf = model.predict_proba(splits["oos_val"].texts).max(axis=1)
        oos_test_conf = model.predict_proba(splits["oos_test"].texts).max(axis=1)
        for key, criterion in (("oos", "balanced"), ("oos_pooled", "pooled")):  # "oos" is the headline result
            chosen = choose_threshold(
                val_probs.max(axis=1), val_probs.argmax(axis=1) == y_val, oos_val_conf, criterion
            )
            res = in_scope_at_threshold(
                probs.max(axis=1), probs.argmax(axis=1) == y_test, oos_test_conf, chosen["tau"]
            )
            run[key] = {
                **chosen,
                "n_val": len(splits["oos_val"]),
                "n_test": len(splits["oos_test"]),
                "test_in_scope_accuracy": res["in_scope_accuracy"],
                "test_in_scope_accepted_share": res["in_scope_accepted_share"],
                "test_oos_recall": res["oos_recall"],
            }
    seconds["eval"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    run["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    line = f"[{name} seed {seed}] test accuracy {run['test']['accuracy']:.4f} macro-F1 {run['test']['macro_f1']:.4f}"
    if "oos" in run:
        o = run["oos"]
        line += f"; tau {o['tau']:.3f}: in-scope {o['test_in_scope_accuracy']:.4f}, oos recall {o['test_oos_recall']:.4f}"
    if "oos_class" in run:
        o = run["oos_class"]["with_distance"]
        line += f"; extra class + distance: in-scope {o['in_scope_accuracy']:.4f}, oos recall {o['oos_recall']:.4f}"
    report(line + f" ({seconds['total']:.0f}s)")
    model.setfit = None  # free the torch weights before the next seed
    gc.collect()
    return run


def _with_oos(split: Split, oos: Split) -> Split:
    from router.intents import OUT_OF_SCOPE

    return Split(split.texts + oos.texts, split.labels + [OUT_OF_SCOPE] * len(oos))


def _extra_class_results(model, t_in: tuple, t_oos: tuple) -> dict:
    """In-scope accuracy and out-of-scope recall on test + oos_test with the out-of-scope class (arg-max,
    no threshold, as Larson et al.), and with the in-scope distance on top (out of scope when above the
    threshold fitted on in-scope val). ``t_in`` is test's (probabilities, distances, label ids), ``t_oos``
    oos_test's (probabilities, distances)."""
    from router.intents import OUT_OF_SCOPE

    col = model.labels.index(OUT_OF_SCOPE)
    (probs_in, dist_in, y_test), (probs_oos, dist_oos) = t_in, t_oos
    pred_in, pred_oos = probs_in.argmax(axis=1), probs_oos.argmax(axis=1)
    out = {
        "n_test": len(probs_in),
        "n_oos_test": len(probs_oos),
        "extra_class": {
            "in_scope_accuracy": float((pred_in == y_test).mean()),
            "oos_recall": float((pred_oos == col).mean()),
        },
    }
    limit = model.distance_threshold
    if dist_in is not None and limit is not None:
        far_in, far_oos = dist_in > limit, dist_oos > limit
        out["with_distance"] = {
            "distance_threshold": limit,
            "in_scope_accuracy": float(((pred_in == y_test) & ~far_in).mean()),
            "oos_recall": float(((pred_oos == col) | far_oos).mean()),
            "oos_only_by_distance": float((far_oos & (pred_oos != col)).mean()),
        }
    return out


def _operating_points(model, val_parts, t_in: tuple, t_oos: tuple, floor: float) -> dict:
    """Out of scope when the arg-max is the out-of-scope class, the distance is above the threshold that
    keeps ``keep`` of in-scope val, or the top probability is under ``tau``. Returns the curve over keep
    (tau 0) on val and test, and the (keep, tau) with the best val out-of-scope recall among those whose
    val in-scope accuracy is at least ``floor`` (ties: the better in-scope accuracy), with its test figures.
    Everything is chosen on val; test (``t_in``, ``t_oos`` as in _extra_class_results) is only read."""
    from router.intents import OUT_OF_SCOPE

    col = model.labels.index(OUT_OF_SCOPE)

    val, oos_val = val_parts
    v_in = (*model.predict_with_distance(val.texts), model.label_ids(val.labels))
    v_oos = model.predict_with_distance(oos_val.texts)
    limits = {k: (float(np.quantile(v_in[1], k)) if k < 1 else float("inf")) for k in KEEPS}

    def point(ins, oos, limit: float, tau: float) -> dict:
        def flagged(probs, dist):
            return (probs.argmax(axis=1) == col) | (dist > limit) | (probs.max(axis=1) < tau)

        correct = (ins[0].argmax(axis=1) == ins[2]) & ~flagged(ins[0], ins[1])
        return {
            "in_scope_accuracy": float(correct.mean()),
            "oos_recall": float(flagged(oos[0], oos[1]).mean()),
        }

    curve = [
        {"keep": k, "val": point(v_in, v_oos, limits[k], 0.0), "test": point(t_in, t_oos, limits[k], 0.0)}
        for k in KEEPS
    ]
    grid = [(k, tau, point(v_in, v_oos, limits[k], tau)) for k in KEEPS for tau in TAUS]
    ok = [g for g in grid if g[2]["in_scope_accuracy"] >= floor]
    chosen = None
    if ok:
        k, tau, on_val = max(ok, key=lambda g: (g[2]["oos_recall"], g[2]["in_scope_accuracy"]))
        chosen = {
            "keep": k,
            "tau": tau,
            "distance_threshold": limits[k],
            "val": on_val,
            "test": point(t_in, t_oos, limits[k], tau),
        }
    return {"in_scope_floor": floor, "curve": curve, "chosen_on_val": chosen}


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
    the operating point chosen on val for ``in_scope_floor`` (training.benchmarks._operating_points).
    With ``out`` the results JSON is written there after every seed (so a long run keeps its progress)
    and at the end, with ``command`` (the command line) recorded."""
    from router.manifest import package_versions
    from training.config import TrainConfig
    from training.model import quiet_libraries
    from training.pipeline import write_json
    from training.train import VERSIONED_PACKAGES

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

    from router.manifest import sha256_file

    result: dict = {
        "benchmark": name,
        "path": str(path),
        "data": {
            "files": {str(f): sha256_file(f) for f in data_files(name, path)},
            "rows": {k: len(v) for k, v in splits.items()},
            "classes": len(splits["train"].classes),
        },
        "shots": shots,
        "protocol": (
            f"{shots} rows per class sampled from train with each seed" if shots else "full train split"
        )
        + "; accuracy on the full test split"
        + (
            "; oos_train trained as an out-of-scope class (and oos_val in val); temperature and in-scope distance "
            "threshold fitted on val; arg-max on test + oos_test, with and without the distance"
            if oos_class
            else "; temperature fitted on val; out-of-scope threshold chosen on val + oos_val, applied to test + oos_test"
            if name == "clinc150"
            else "; no val split, so no temperature (T = 1)"
        ),
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
    t0 = time.perf_counter()
    for seed in seed_list:
        cfg = base_cfg.model_copy(update={"seed": seed})
        result["runs"].append(
            _seed_run(name, splits, shots, seed, cfg, report, show_progress, oos_class, in_scope_floor)
        )
        result["summary"] = summarize(result["runs"])
        result["seconds_total"] = round(time.perf_counter() - t0, 2)
        if out is not None and seed != seed_list[-1]:
            write_json({"command": command, **result}, out)
    result["complete"] = True
    if out is not None:
        write_json({"command": command, **result}, out)
    return result


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
