"""Evaluation data through ``datasets``: local JSONL / CSV / TSV / Parquet files or Hub dataset names.

``load_labeled`` returns texts and labels and refuses (``DataError``) rows with an empty text, a
missing or unknown label, naming the file and the line (JSONL) or row (other formats) of each
problem. ``load_unlabeled`` reads the out-of-scope file: texts only, whitespace-only rows allowed
(they are what such a file tests), empty strings and missing texts refused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from router.intents import INTENTS
from router.manifest import sha256_file

LOCAL_FORMATS = {
    ".jsonl": "json",
    ".json": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
}
MAX_SHOWN = 10


class DataError(ValueError):
    """Evaluation data cannot be used; the message names the source and the rows at fault."""


@dataclass
class LabeledData:
    texts: list[str]
    labels: list[str]
    source: str
    format: str
    rows: list[int] = field(default_factory=list)  # 1-based row (data row, not counting a CSV header)
    lines: list[int] | None = None  # 1-based file line of each row, JSONL only
    split: str | None = None
    sha256: str | None = None
    skipped: list[dict] = field(default_factory=list)

    def where(self, i: int) -> str:
        return _where(self.lines[i] if self.lines else None, self.rows[i])

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class UnlabeledData:
    texts: list[str]
    source: str
    format: str
    rows: list[int] = field(default_factory=list)
    lines: list[int] | None = None
    split: str | None = None
    sha256: str | None = None
    skipped: list[dict] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.texts)


def _where(line: int | None, row: int) -> str:
    return f"line {line}" if line is not None else f"row {row}"


# ------------------------------------------------------------------------------------- loading
def load_labeled(
    source: str | Path,
    *,
    labels: Sequence[str] = INTENTS,
    text_column: str = "text",
    label_column: str = "label",
    split: str | None = None,
    skip_invalid: bool = False,
) -> LabeledData:
    """Load labeled messages. Invalid rows raise DataError, or are dropped and listed in ``skipped``."""
    table, fmt, lines, digest = _load_table(source, split)
    _require_columns(table, source, [text_column, label_column], "label")
    label_names = _class_label_names(table, label_column)
    texts_col, labels_col = table[text_column], table[label_column]
    known = list(labels)
    texts, out_labels, rows, kept_lines, problems = [], [], [], [], []
    for i, (text, label) in enumerate(zip(texts_col, labels_col)):
        if label_names is not None and isinstance(label, int) and 0 <= label < len(label_names):
            label = label_names[label]
        reason = _text_problem(text, text_column, allow_blank=False, fmt=fmt)
        if reason is None:
            if label is None:
                reason = f"{_absent(fmt)} '{label_column}'"
            elif isinstance(label, str) and not label.strip():
                reason = f"empty '{label_column}'"
            elif not isinstance(label, str):
                reason = f"'{label_column}' must be a string, got {type(label).__name__} {label!r}"
            elif label not in known:
                reason = f"unknown label {label!r} (the model knows: {', '.join(known)})"
        if reason is not None:
            problems.append({"row": i + 1, "line": lines[i] if lines else None, "reason": reason})
            continue
        texts.append(text)
        out_labels.append(label)
        rows.append(i + 1)
        if lines:
            kept_lines.append(lines[i])
    _handle_problems(problems, source, skip_invalid)
    if not texts:
        raise DataError(f"{source}: no usable rows")
    return LabeledData(
        texts=texts,
        labels=out_labels,
        source=str(source),
        format=fmt,
        rows=rows,
        lines=kept_lines if lines else None,
        split=split if fmt == "hub" else None,
        sha256=digest,
        skipped=problems,
    )


def load_unlabeled(
    source: str | Path,
    *,
    text_column: str = "text",
    split: str | None = None,
    skip_invalid: bool = False,
) -> UnlabeledData:
    """Load unlabeled (out-of-scope) messages; a label column, if present, is ignored."""
    table, fmt, lines, digest = _load_table(source, split)
    _require_columns(table, source, [text_column], None)
    texts, rows, kept_lines, problems = [], [], [], []
    for i, text in enumerate(table[text_column]):
        reason = _text_problem(text, text_column, allow_blank=True, fmt=fmt)
        if reason is not None:
            problems.append({"row": i + 1, "line": lines[i] if lines else None, "reason": reason})
            continue
        texts.append(text)
        rows.append(i + 1)
        if lines:
            kept_lines.append(lines[i])
    _handle_problems(problems, source, skip_invalid)
    if not texts:
        raise DataError(f"{source}: no usable rows")
    return UnlabeledData(
        texts=texts,
        source=str(source),
        format=fmt,
        rows=rows,
        lines=kept_lines if lines else None,
        split=split if fmt == "hub" else None,
        sha256=digest,
        skipped=problems,
    )


def _absent(fmt: str) -> str:
    """A null cell: an empty field in CSV/TSV, a missing key (or null) in JSON and Hub data."""
    return "empty" if fmt in ("csv", "tsv") else "missing"


def _text_problem(text, column: str, allow_blank: bool, fmt: str) -> str | None:
    if text is None:
        return f"{_absent(fmt)} '{column}'"
    if not isinstance(text, str):
        return f"'{column}' must be a string, got {type(text).__name__}"
    if text == "" or (not allow_blank and not text.strip()):
        return f"empty '{column}'"
    return None


def _handle_problems(problems: list[dict], source, skip_invalid: bool) -> None:
    if not problems or skip_invalid:
        return
    shown = "\n".join(f"  {_where(p['line'], p['row'])}: {p['reason']}" for p in problems[:MAX_SHOWN])
    more = f"\n  ... and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
    raise DataError(
        f"{source}: {len(problems)} invalid row(s):\n{shown}{more}\n"
        "(fix the data, or pass skip_invalid / --skip-invalid to leave these rows out)"
    )


def _require_columns(table, source, columns: list[str], kind: str | None) -> None:
    have = list(table.column_names)
    for c in columns:
        if c not in have:
            flag = "--label-column" if kind == "label" and c == columns[-1] else "--text-column"
            raise DataError(
                f"{source}: no column {c!r} (columns: {', '.join(have) or 'none'}); name it with {flag}"
            )


def _class_label_names(table, column: str) -> list[str] | None:
    """Names of a ClassLabel column (Hub datasets often store labels as integers)."""
    feature = getattr(table, "features", {}).get(column)
    names = getattr(feature, "names", None)
    return list(names) if names else None


# ----------------------------------------------------------------------------------- sources
def _load_table(source: str | Path, split: str | None):
    """Return (Dataset, format, file line of each row or None, sha256 or None)."""
    import datasets

    path = Path(source)
    suffix = path.suffix.lower()
    is_local = path.exists() or suffix in LOCAL_FORMATS or str(source).startswith((".", "/"))
    with _quiet(datasets):
        if is_local:
            if not path.is_file():
                raise DataError(f"{source}: file not found")
            builder = LOCAL_FORMATS.get(suffix)
            if builder is None:
                raise DataError(
                    f"{source}: unknown file type {suffix or '(none)'}; use one of {', '.join(sorted(LOCAL_FORMATS))}"
                )
            kwargs = {"delimiter": "\t"} if suffix == ".tsv" else {}
            try:
                table = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
            except Exception as e:
                raise DataError(f"{source}: cannot read as {suffix[1:].upper()}: {_cause(e)}") from e
            lines = _jsonl_lines(path) if builder == "json" and suffix != ".json" else None
            if lines is not None and len(lines) != len(table):
                lines = None  # a JSON value spread over several lines: fall back to row numbers
            return table, suffix[1:], lines, sha256_file(path)
        try:
            table = datasets.load_dataset(str(source), split=split or "test")
        except Exception as e:
            offline = _offline()
            hint = " (the Hub is offline: set HF_HUB_OFFLINE=0 to allow downloads)" if offline else ""
            raise DataError(
                f"{source}: not a local file, and loading it as a Hub dataset (split "
                f"{split or 'test'!r}) failed{hint}: {_cause(e)}"
            ) from e
        return table, "hub", None, None


def _offline() -> bool:
    import os

    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes")


def _cause(e: BaseException) -> str:
    msgs = []
    while e is not None and len(msgs) < 3:
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if text not in msgs:
            msgs.append(text)
        e = e.__cause__ or e.__context__
    return ": ".join(msgs)


def _jsonl_lines(path: Path) -> list[int]:
    with open(path, encoding="utf-8", errors="replace") as f:
        return [n for n, line in enumerate(f, start=1) if line.strip()]


@contextlib.contextmanager
def _quiet(datasets) -> Iterator[None]:
    """No progress bars while loading; the caller's setting is restored afterwards."""
    was_disabled = datasets.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if not was_disabled:
            datasets.enable_progress_bars()
