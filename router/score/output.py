"""The output of a scoring run: its columns, the part files that make it resumable, and the merge.

Decisions are written to ``part-<first row>-<end row>.parquet`` files, each written to a temporary
name, fsynced and renamed, so a part exists whole or not at all; ``merge_parts`` joins them into the
output (Parquet or JSONL). The resume logic that uses them is in ``router.score.run``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from pathlib import Path

import pyarrow as pa

from router.score.options import ScoreOptions

OUT_FORMATS = {".parquet": "parquet", ".jsonl": "jsonl"}
PART_RE = re.compile(r"^part-(\d{12})-(\d{12})\.parquet$")


# ----------------------------------------------------------------------------------- columns
def output_schema(opts: ScoreOptions) -> pa.Schema:
    fields = [pa.field("row", pa.int64())]
    if opts.id_column:
        fields.append(pa.field("id", pa.string()))
    if opts.keep_text:
        fields.append(pa.field("text", pa.string()))
    if opts.with_labels:
        fields.append(pa.field("label", pa.string()))
    strings = pa.list_(pa.string())
    fields += [
        pa.field("intent", pa.string()),
        pa.field("intents", strings),
        pa.field("top_intent", pa.string()),
        pa.field("top_label", pa.string()),
        pa.field("confidence", pa.float64()),
        pa.field("source", pa.string()),
        pa.field("reason_code", pa.string()),
        pa.field("skills_required", strings),
        pa.field("skills_optional", strings),
        pa.field("denied", strings),
        pa.field("denied_required", strings),
        pa.field("servable", pa.bool_()),
        pa.field("error", pa.string()),
    ]
    return pa.schema(fields)


# ------------------------------------------------------------------------------------ parts
def parts_dir(out: Path) -> Path:
    return out.with_name(out.name + ".parts")


def completed_rows(pdir: Path) -> int:
    """Rows 0..n-1 are in complete parts; leftovers of an interrupted write are removed."""
    spans = []
    for p in pdir.iterdir():
        if p.name.endswith(".tmp"):
            p.unlink()
            continue
        m = PART_RE.match(p.name)
        if m:
            spans.append((int(m.group(1)), int(m.group(2)), p))
    n = 0
    for a, b, p in sorted(spans):
        if a == n:
            n = b
        else:  # not contiguous (cannot happen with one writer): drop it, its rows are scored again
            p.unlink()
    return n


def write_part(pdir: Path, table: pa.Table) -> Path:
    import pyarrow.parquet as pq

    first, last = table.column("row")[0].as_py(), table.column("row")[-1].as_py()
    final = pdir / f"part-{first:012d}-{last + 1:012d}.parquet"
    tmp = final.with_name(final.name + ".tmp")
    pq.write_table(table, tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, final)
    with contextlib.suppress(OSError):  # make the rename durable too
        fd = os.open(pdir, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    return final


def _parts(pdir: Path) -> list[Path]:
    return sorted(p for p in pdir.iterdir() if PART_RE.match(p.name))


def merge_parts(pdir: Path, out: Path, opts: ScoreOptions) -> int:
    """Write the parts of ``pdir`` in row order to ``out`` (Parquet or JSONL, by its suffix) through a
    temporary name and an atomic rename. Returns the row count."""
    import pyarrow.parquet as pq

    parts = _parts(pdir)
    tmp = out.with_name(out.name + ".tmp")
    schema = output_schema(opts)
    n = 0
    if out.suffix.lower() == ".parquet":
        with pq.ParquetWriter(tmp, schema) as w:
            for p in parts:
                t = pq.read_table(p)
                w.write_table(t)
                n += t.num_rows
    else:
        with open(tmp, "w", encoding="utf-8") as f:
            for p in parts:
                t = pq.read_table(p)
                n += t.num_rows
                for rec in t.to_pylist():
                    f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    os.replace(tmp, out)
    return n
