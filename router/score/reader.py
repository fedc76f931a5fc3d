"""The input of a scoring run, streamed: JSONL line by line, CSV/TSV through pyarrow's streaming reader,
Parquet by record batch, so a file never has to fit in memory. Rows are numbered from 0 in file order
(JSONL: non-blank lines).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from router.score.options import ScoreError, ScoreOptions, model_labels

IN_FORMATS = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "tsv", ".parquet": "parquet"}


def input_format(path: Path) -> str:
    fmt = IN_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ScoreError(f"{path}: unknown input type {path.suffix or '(none)'}; use {', '.join(IN_FORMATS)}")
    return fmt


def iter_input(path: Path, opts: ScoreOptions, start: int = 0, batch_rows: int = 2048) -> Iterator[dict]:
    """Yield batches {row, text, [id], [label], error} from row ``start`` on, ``batch_rows`` at a time.

    ``error`` is None for a usable row, else why it is not (missing text, not a string, bad JSON...)."""
    fmt = input_format(path)
    raw = (
        _iter_jsonl(path, opts, start, batch_rows)
        if fmt == "jsonl"
        else _iter_arrow(path, fmt, opts, start, batch_rows)
    )
    for b in raw:
        yield _check_batch(b, opts, path)


def _check_batch(b: dict, opts: ScoreOptions, path: Path) -> dict:
    errors = b.setdefault("error", [None] * len(b["row"]))
    for i, t in enumerate(b["text"]):
        if errors[i] is None:
            if t is None:
                errors[i] = f"missing '{opts.text_column}'"
            elif not isinstance(t, str):
                errors[i] = f"'{opts.text_column}' must be a string, got {type(t).__name__}"
        if opts.with_labels and errors[i] is None:
            lab = b["label"][i]
            if lab not in model_labels(opts.model_dir):
                errors[i] = (
                    f"unknown label {lab!r} in '{opts.label_column}' (the model's are: "
                    + ", ".join(model_labels(opts.model_dir))
                    + ")"
                )
        if errors[i] is not None:
            b["text"][i] = None
            if not opts.skip_invalid:
                where = f"line {b['line'][i]}" if "line" in b else f"row {b['row'][i]}"
                raise ScoreError(
                    f"{path}: {where}: {errors[i]} (fix the data, or pass --skip-invalid to write the row "
                    "with an 'error' and no decision)"
                )
    b.pop("line", None)
    return b


def _empty(opts: ScoreOptions) -> dict:
    b: dict[str, list] = {"row": [], "text": [], "error": [], "line": []}
    if opts.id_column:
        b["id"] = []
    if opts.context_column:
        b["context"] = []
    if opts.with_labels:
        b["label"] = []
    return b


def _iter_jsonl(path: Path, opts: ScoreOptions, start: int, batch_rows: int) -> Iterator[dict]:
    row = -1
    b = _empty(opts)
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            row += 1
            if row < start:  # resume: count rows without parsing them
                continue
            err, obj = None, None
            try:
                obj = json.loads(line)
                if not isinstance(obj, dict):
                    err, obj = "not a JSON object", None
            except ValueError as e:
                err = f"invalid JSON: {e}"
            obj = obj or {}
            b["row"].append(row)
            b["line"].append(lineno)
            b["text"].append(obj.get(opts.text_column))
            b["error"].append(err)
            if opts.id_column:
                v = obj.get(opts.id_column)
                b["id"].append(None if v is None else str(v))
            if opts.context_column:
                v = obj.get(opts.context_column)
                b["context"].append(v if isinstance(v, str) else None)
            if opts.with_labels:
                b["label"].append(obj.get(opts.label_column))
            if len(b["row"]) >= batch_rows:
                yield b
                b = _empty(opts)
    if b["row"]:
        yield b


def _iter_arrow(path: Path, fmt: str, opts: ScoreOptions, start: int, batch_rows: int) -> Iterator[dict]:
    cols = (
        [opts.text_column]
        + ([opts.id_column] if opts.id_column else [])
        + ([opts.context_column] if opts.context_column else [])
        + ([opts.label_column] if opts.with_labels else [])
    )
    batches = _arrow_batches(path, fmt, cols, start)
    row = start
    pending: list[pa.RecordBatch] = []
    n_pending = 0
    for rb, first in batches:
        if first + rb.num_rows <= start:
            continue
        if first < start:
            rb = rb.slice(start - first)
        pending.append(rb)
        n_pending += rb.num_rows
        while n_pending >= batch_rows:
            t = pa.Table.from_batches(pending)
            yield _to_batch(t.slice(0, batch_rows), row, opts)
            row += batch_rows
            rest = t.slice(batch_rows)
            pending, n_pending = rest.to_batches(), rest.num_rows
    if n_pending:
        yield _to_batch(pa.Table.from_batches(pending), row, opts)


def _to_batch(t: pa.Table, first_row: int, opts: ScoreOptions) -> dict:
    b = {
        "row": list(range(first_row, first_row + t.num_rows)),
        "text": t.column(opts.text_column).to_pylist(),
    }
    if opts.id_column:
        b["id"] = [None if v is None else str(v) for v in t.column(opts.id_column).to_pylist()]
    if opts.context_column:
        b["context"] = [v if isinstance(v, str) else None for v in t.column(opts.context_column).to_pylist()]
    if opts.with_labels:
        b["label"] = t.column(opts.label_column).to_pylist()
    return b


def _arrow_batches(path: Path, fmt: str, cols: list[str], start: int) -> Iterator[tuple[pa.RecordBatch, int]]:
    """(record batch, index of its first row); Parquet row groups before ``start`` are not read."""
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        _require(path, pf.schema_arrow.names, cols)
        first = 0
        for g in range(pf.num_row_groups):
            n = pf.metadata.row_group(g).num_rows
            if first + n > start:
                for rb in pf.iter_batches(batch_size=8192, row_groups=[g], columns=cols):
                    yield rb, first
                    first += rb.num_rows
            else:
                first += n
        return
    import pyarrow.csv as pcsv

    delim = "\t" if fmt == "tsv" else ","
    try:
        reader = pcsv.open_csv(
            path,
            read_options=pcsv.ReadOptions(block_size=1 << 20),
            parse_options=pcsv.ParseOptions(delimiter=delim, newlines_in_values=True),
            convert_options=pcsv.ConvertOptions(
                column_types={c: pa.string() for c in cols}, include_columns=cols, strings_can_be_null=False
            ),
        )
    except (pa.ArrowInvalid, KeyError) as e:
        raise ScoreError(f"{path}: cannot read as {fmt.upper()}: {e}") from e
    first = 0
    for rb in reader:
        yield rb, first
        first += rb.num_rows


def _require(path: Path, have: list[str], cols: list[str]) -> None:
    for c in cols:
        if c not in have:
            raise ScoreError(
                f"{path}: no column {c!r} (columns: {', '.join(have)}); name it with a column flag"
            )


def count_rows(path: Path) -> int | None:
    """Rows in the input, for the progress bar (cheap for Parquet; one pass over the bytes otherwise)."""
    fmt = input_format(path)
    if fmt == "parquet":
        import pyarrow.parquet as pq

        return pq.ParquetFile(path).metadata.num_rows
    if fmt == "jsonl":
        with open(path, "rb") as f:
            return sum(1 for line in f if line.strip())
    return None  # CSV rows can span lines; the bar shows a count without a total
