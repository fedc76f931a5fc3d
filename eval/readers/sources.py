"""Reading the sources data comes from: a file's text (UTF-8 checked; '-' is stdin), JSONL rows
(``iter_jsonl``, the JSONL reader under eval.readers.loader's loaders and the corpus checker), and any source as a
table (``load_table``): JSONL with the standard library, CSV, TSV, Parquet and Hub datasets through
``datasets`` (the ``eval`` or ``train`` extra). ``DataError`` is the one-line error of data that cannot be
used, naming the source and the line; eval.readers.loader's loaders raise it too.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from router.manifest import sha256_file

LOCAL_FORMATS = {
    ".jsonl": "json",
    ".json": "json",
    ".ndjson": "json",
    ".csv": "csv",
    ".tsv": "csv",
    ".parquet": "parquet",
}
JSONL_SUFFIXES = (".jsonl", ".ndjson")


class DataError(ValueError):
    """Data cannot be used; the message (one line) names the source and the first row at fault."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)  # every "file:line: reason", for callers that list them all


# ------------------------------------------------------------------------------------- JSONL
def decode_utf8(raw: bytes, source) -> str:
    """Bytes as UTF-8, or a DataError naming the line of the first bad byte."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        raise DataError(f"{source}:{line}: not valid UTF-8 (byte 0x{raw[e.start]:02x})") from e


def read_text(source: str | Path) -> str:
    """A file's text ('-' is stdin), with one-line errors for a missing file and invalid UTF-8."""
    if str(source) == "-":
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode()
        return decode_utf8(raw, "<stdin>")
    path = Path(source)
    if not path.is_file():
        raise DataError(f"{source}: file not found")
    return decode_utf8(path.read_bytes(), source)


def iter_jsonl(text: str) -> Iterator[tuple[int, dict | None, str | None]]:
    """(line, object, None) per non-blank line, or (line, None, reason) when the line is not a JSON object."""
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue  # blank lines between rows are tolerated
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            yield n, None, f"invalid JSON: {e.msg} (column {e.colno})"
            continue
        if not isinstance(obj, dict):
            yield n, None, f"expected a JSON object, got {type(obj).__name__}"
            continue
        yield n, obj, None


DATA_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv", ".parquet")  # what a corpus folder holds


def iter_rows(path: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """``iter_jsonl`` for any local data file: (line, row, None) per row, or (line, None, reason). CSV and
    TSV rows (a header first) count lines as the file does, an empty cell is a missing value; Parquet rows
    are numbered from 1; any other suffix is read as JSONL. Raises DataError for a file that cannot be
    read at all (missing, not UTF-8, not Parquet)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            rows = pq.read_table(path).to_pylist()
        except Exception as e:
            raise DataError(f"{path}: cannot read as Parquet: {_cause(e)}") from e
        yield from ((n, row, None) for n, row in enumerate(rows, start=1))
        return
    text = read_text(path)
    if suffix not in (".csv", ".tsv"):
        yield from iter_jsonl(text)
        return
    import csv
    import io

    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if suffix == ".tsv" else ",")
    if not reader.fieldnames or "text" not in reader.fieldnames:
        raise DataError(f"{path}:1: a header with a 'text' column comes first (got {reader.fieldnames})")
    for row in reader:
        if None in row:
            yield reader.line_num, None, f"more cells than the header's {len(reader.fieldnames)} columns"
            continue
        yield reader.line_num, {k: v if v != "" or k == "text" else None for k, v in row.items()}, None


class _Table:
    """Columns of JSONL rows, shaped like the bits of a ``datasets.Dataset`` the loaders read."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        names: dict[str, None] = {}
        for r in rows:
            names.update(dict.fromkeys(r))
        self.column_names = list(names)
        self.features: dict = {}

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, column: str) -> list:
        return [r.get(column) for r in self.rows]


def jsonl_table(source, text: str) -> tuple[_Table, list[int]]:
    rows, lines = [], []
    for n, obj, problem in iter_jsonl(text):
        if problem is not None:
            raise DataError(f"{source}:{n}: {problem}")
        rows.append(obj)
        lines.append(n)
    return _Table(rows), lines


# ----------------------------------------------------------------------------------- sources
def load_table(source: str | Path, split: str | None):
    """Return (table, format, file line of each row or None, sha256 or None)."""
    path = Path(source)
    suffix = path.suffix.lower()
    is_local = path.exists() or suffix in LOCAL_FORMATS or str(source).startswith((".", "/"))
    if is_local:
        if not path.is_file():
            raise DataError(f"{source}: file not found")
        builder = LOCAL_FORMATS.get(suffix)
        if builder is None:
            raise DataError(
                f"{source}: unknown file type {suffix or '(none)'}; use one of {', '.join(sorted(LOCAL_FORMATS))}"
            )
        if suffix in JSONL_SUFFIXES:
            table, lines = jsonl_table(source, read_text(path))
            return table, suffix[1:], lines, sha256_file(path)
        datasets = _datasets(source)
        kwargs = {"delimiter": "\t"} if suffix == ".tsv" else {}
        with _quiet(datasets):
            try:
                table = datasets.load_dataset(builder, data_files=str(path), split="train", **kwargs)
            except Exception as e:
                raise DataError(f"{source}: cannot read as {suffix[1:].upper()}: {_cause(e)}") from e
        return table, suffix[1:], None, sha256_file(path)
    datasets = _datasets(source)
    with _quiet(datasets):
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


def _datasets(source):
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - depends on the install
        raise DataError(
            f"{source}: reading this format needs the 'datasets' package: pip install '.[eval]'"
        ) from e
    return datasets


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
