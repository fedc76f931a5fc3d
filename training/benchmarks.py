"""Public intent benchmarks: readers for CLINC150 and BANKING77, k-shot sampling, and a runner that
trains one SetFit model per seed (the same fitting code as ``training.train``) and reports test
accuracy as mean and spread over seeds.

File formats (the datasets are not shipped with the project; the user points at their own copy):

* CLINC150: ``data_full.json`` with keys ``train``, ``val``, ``test``, ``oos_train``, ``oos_val``,
  ``oos_test``; each item is ``[text, label]`` (label ``"oos"`` in the ``oos_*`` keys).
* BANKING77: ``train.csv`` and ``test.csv`` with header ``text,category``. Some quoted fields span
  lines, so they are parsed with the ``csv`` module, never line by line.

Protocol (k-shot): sample k training rows per class with a fixed seed, train, evaluate on the whole
test split; repeat over seeds. A temperature is fitted on val where the dataset has one (CLINC150).
For CLINC150 the out-of-scope threshold is chosen on val (in-scope val + oos_val) only, then applied
to test + oos_test: a message is accepted when its top probability is >= tau, and an out-of-scope
message is caught when it is not accepted.
"""

from __future__ import annotations

import gc
import json
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

Reporter = Callable[[str], None]

BENCHMARKS = ("clinc150", "banking77")
CLINC_FILE = "data_full.json"
CLINC_KEYS = ("train", "val", "test", "oos_train", "oos_val", "oos_test")
BANKING_FILES = ("train.csv", "test.csv")


class BenchmarkDataError(ValueError):
    """A benchmark file is missing or not in the expected format; the message names the file."""


@dataclass
class Split:
    texts: list[str]
    labels: list[str]

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.labels):
            raise ValueError(f"{len(self.texts)} texts but {len(self.labels)} labels")

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def classes(self) -> list[str]:
        return sorted(set(self.labels))


# ------------------------------------------------------------------------------------ readers
def _clinc_file(path: str | Path) -> Path:
    p = Path(path)
    p = p / CLINC_FILE if p.is_dir() else p
    if not p.is_file():
        raise BenchmarkDataError(
            f"{p}: CLINC150 file not found (expected {CLINC_FILE} or a folder holding it)"
        )
    return p


def read_clinc150(path: str | Path) -> dict[str, Split]:
    """Read CLINC150's ``data_full.json`` (or a folder holding it) into train/val/test/oos_train/oos_val/oos_test."""
    f = _clinc_file(path)
    try:
        data = json.loads(f.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise BenchmarkDataError(f"{f}: not valid JSON ({e})") from e
    if not isinstance(data, dict):
        raise BenchmarkDataError(f"{f}: expected a JSON object with keys {', '.join(CLINC_KEYS)}")
    missing = [k for k in CLINC_KEYS if k not in data]
    if missing:
        raise BenchmarkDataError(f"{f}: missing key(s) {', '.join(missing)}")
    out = {}
    for key in CLINC_KEYS:
        texts, labels = [], []
        for i, item in enumerate(data[key]):
            if not (
                isinstance(item, (list, tuple)) and len(item) == 2 and all(isinstance(x, str) for x in item)
            ):
                raise BenchmarkDataError(f"{f}: {key}[{i}] is not a [text, label] pair of strings: {item!r}")
            text, label = item[0].strip(), item[1].strip()
            if not text or not label:
                raise BenchmarkDataError(f"{f}: {key}[{i}] has an empty text or label")
            texts.append(text)
            labels.append(label)
        out[key] = Split(texts, labels)
    leaked = sorted(set(out["train"].labels) & {"oos"})
    if leaked:
        raise BenchmarkDataError(f"{f}: the in-scope train split holds label(s) {leaked}")
    return out


def _read_banking_csv(f: Path) -> Split:
    """One BANKING77 CSV through the project's data loader (quoted fields may span lines)."""
    from eval.data import DataError, load_labeled

    if not f.is_file():
        raise BenchmarkDataError(f"{f}: BANKING77 file not found")
    header = f.open(encoding="utf-8", errors="replace").readline().strip().split(",")
    label_col = "category" if "category" in header else "label" if "label" in header else None
    if "text" not in header or label_col is None:
        raise BenchmarkDataError(f"{f}: header must have 'text' and 'category' columns, found {header}")
    try:
        data = load_labeled(f, labels=None, text_column="text", label_column=label_col)
    except DataError as e:
        raise BenchmarkDataError(str(e)) from e
    return Split([t.strip() for t in data.texts], [l.strip() for l in data.labels])


def read_banking77(path: str | Path) -> dict[str, Split]:
    """Read BANKING77's ``train.csv`` and ``test.csv`` from a folder into train/test."""
    p = Path(path)
    if not p.is_dir():
        raise BenchmarkDataError(f"{p}: expected the BANKING77 folder holding {' and '.join(BANKING_FILES)}")
    return {name.split(".")[0]: _read_banking_csv(p / name) for name in BANKING_FILES}


def read_benchmark(name: str, path: str | Path) -> dict[str, Split]:
    if name == "clinc150":
        return read_clinc150(path)
    if name == "banking77":
        return read_banking77(path)
    raise ValueError(f"unknown benchmark {name!r}; choose one of {', '.join(BENCHMARKS)}")


def data_files(name: str, path: str | Path) -> list[Path]:
    return [_clinc_file(path)] if name == "clinc150" else [Path(path) / n for n in BANKING_FILES]


# ---------------------------------------------------------------------------------- sampling
def k_shot(split: Split, k: int, seed: int) -> Split:
    """k rows per class, drawn without replacement with a fixed seed; rows keep their file order.

    The same (split, k, seed) always gives the same sample; every class must have at least k rows."""
    if k < 1:
        raise ValueError("k must be >= 1")
    labels = np.asarray(split.labels)
    rng = np.random.default_rng(seed)
    chosen = []
    for c in split.classes:  # sorted: the draw order does not depend on the file's class order
        idx = np.flatnonzero(labels == c)
        if len(idx) < k:
            raise ValueError(f"class {c!r} has {len(idx)} rows, fewer than k={k}")
        chosen.extend(rng.choice(idx, size=k, replace=False).tolist())
    chosen.sort()
    return Split([split.texts[i] for i in chosen], [split.labels[i] for i in chosen])


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
) -> dict:
    from eval.evaluator import split_metrics
    from eval.thresholds import choose_threshold, in_scope_at_threshold
    from training.model import IntentModel

    t_start = time.perf_counter()
    train = k_shot(splits["train"], shots, seed) if shots else splits["train"]
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
    probs = model.predict_proba(test.texts)
    m = split_metrics(probs, y_test, model.labels)
    run["test"] = {k: m[k] for k in ("n", "accuracy", "macro_f1", "ece", "nll")}

    if "oos_val" in splits and val is not None:
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
    report(line + f" ({seconds['total']:.0f}s)")
    model.setfit = None  # free the torch weights before the next seed
    gc.collect()
    return run


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
    **train_options,
) -> dict:
    """Train and evaluate one SetFit model per seed on a public benchmark; return the results dict.

        ``shots`` None or 0 trains on the full train split. ``seeds`` is a count (seeds 0..n-1) or the seeds
        themselves; each seed draws the k-shot sample and seeds training. ``max_steps``, ``batch_size``,
        ``base_model`` and ``train_options`` (any other ``TrainConfig`` field, e.g. ``head_c``) override the
        ``TrainConfig`` defaults. With ``out`` the results JSON is written there after every seed (so a long
    run keeps its progress) and at the end, with ``command`` (the command line) recorded."""
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
            "; temperature fitted on val; out-of-scope threshold chosen on val + oos_val, applied to test + oos_test"
            if name == "clinc150"
            else "; no val split, so no temperature (T = 1)"
        ),
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
        result["runs"].append(_seed_run(name, splits, shots, seed, cfg, report, show_progress))
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
    rows.append(
        ("seconds per seed", f"{s['seconds_per_seed']['mean']:.0f} ± {s['seconds_per_seed']['std']:.0f}")
    )
    return rows
