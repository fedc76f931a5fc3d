"""Public intent benchmarks' data: readers for CLINC150 and BANKING77, and k-shot sampling.

File formats (the datasets are not shipped with the project; the user points at their own copy):

* CLINC150: ``data_full.json`` with keys ``train``, ``val``, ``test``, ``oos_train``, ``oos_val``,
  ``oos_test``; each item is ``[text, label]`` (label ``"oos"`` in the ``oos_*`` keys).
* BANKING77: ``train.csv`` and ``test.csv`` with header ``text,category``. Some quoted fields span
  lines, so they are parsed with the ``csv`` module, never line by line.

The runner that trains and evaluates on them is ``training.benchmarks.runner``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

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
    from eval.readers.loader import load_labeled
    from eval.readers.sources import DataError

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
