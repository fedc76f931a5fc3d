"""A scoring run: route every row of a JSONL / CSV / TSV / Parquet file, write the decisions, resume
after a crash.

The input is streamed by ``router.score.reader`` and the decisions written by ``router.score.output``;
this module runs the scoring loop and makes it resumable.

Resume: decisions go to ``OUT.parts/part-<first row>-<end row>.parquet``, each written to a temporary
name, fsynced and renamed, so a part exists whole or not at all. ``_meta.json`` holds the input's
fingerprint and the options; a re-run with the same input and options continues after the last
complete part (rows of a part cut short by a crash were never written and are scored again), and a
run with a different input or options refuses. When all rows are scored, the parts are merged into
OUT (Parquet or JSONL, written to a temporary name and renamed) and the parts folder is removed. So
every row lands in exactly one part: none is lost or written twice.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa

from router.score.options import ScoreError, ScoreOptions
from router.score.output import OUT_FORMATS, completed_rows, merge_parts, output_schema, parts_dir, write_part
from router.score.reader import count_rows, input_format, iter_input

META = "_meta.json"
DONE = "_done.json"


# ----------------------------------------------------------------------------------- resume
def decisions_table(batch: dict[str, list], router, opts: ScoreOptions) -> pa.Table:
    """Route one input batch (columns row, text, [id], [label], error) and return output rows.

    Used by the local runner and by each Ray actor, so both write the same columns."""
    texts = batch["text"]
    errors = list(batch["error"])
    ok = [i for i, e in enumerate(errors) if e is None]
    contexts = batch.get("context") or [None] * len(texts)
    alone = [i for i in ok if not contexts[i]]  # one route_batch; a row with its previous message alone
    decisions = router.route_batch([texts[i] for i in alone], opts.role) if alone else []
    by_row = dict(zip(alone, decisions, strict=True))
    for i in ok:
        if contexts[i]:
            by_row[i] = router.route(texts[i], opts.role, context=contexts[i])
    cols: dict[str, list] = {"row": list(batch["row"])}
    if opts.id_column:
        cols["id"] = list(batch["id"])
    if opts.keep_text:
        cols["text"] = list(texts)
    if opts.with_labels:
        cols["label"] = list(batch["label"])
    names = [
        "intent",
        "intents",
        "top_intent",
        "top_label",
        "confidence",
        "source",
        "reason_code",
        "skills_required",
        "skills_optional",
        "denied",
        "denied_required",
        "servable",
    ]
    for n in names:
        cols[n] = []
    for i in range(len(texts)):
        d = by_row.get(i)
        if d is None:
            for n in names:
                cols[n].append(None)
            continue
        cols["intent"].append(d.intent)
        cols["intents"].append(list(d.intents))
        cols["top_intent"].append(d.ranking[0].intent if d.ranking else None)
        cols["top_label"].append(_top_label(d))
        cols["confidence"].append(d.confidence)
        cols["source"].append(d.source)
        cols["reason_code"].append(d.reason_code.value)
        cols["skills_required"].append(d.skills.required)
        cols["skills_optional"].append(d.skills.optional)
        cols["denied"].append([x.skill for x in d.denied])
        cols["denied_required"].append([x.skill for x in d.denied if x.required])
        cols["servable"].append(d.servable)
    cols["error"] = errors
    return pa.table(cols, schema=output_schema(opts))


def _top_label(d) -> str | None:
    """The classifier's top label (an intent, out of scope or a continuation), as its trace step records
    it; None when the classifier did not run (the guardrail answered)."""
    step = next((s for s in d.trace if s.stage == "classifier"), None)
    return step.detail.get("label") if step is not None else None


def fingerprint_input(path: Path) -> dict:
    """Size, mtime and a hash of the first and last MiB: cheap on a large file, and any append, rewrite
    or truncation changes it."""
    st = path.stat()
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read(1 << 20))
        if st.st_size > 1 << 20:
            f.seek(max(1 << 20, st.st_size - (1 << 20)))
            h.update(f.read())
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256_ends": h.hexdigest(),
    }


def prepare(inp: Path, out: Path, opts: ScoreOptions, overwrite: bool) -> tuple[Path, int, bool]:
    """Create or reopen the parts folder; return it, the first row to score and whether input is done."""
    if not inp.is_file():
        raise ScoreError(f"{inp}: file not found")
    input_format(inp)
    if out.suffix.lower() not in OUT_FORMATS:
        raise ScoreError(f"{out}: output must end in {' or '.join(OUT_FORMATS)}")
    pdir = parts_dir(out)
    meta = {"input": fingerprint_input(inp), "options": opts.fingerprint(), "output": out.suffix.lower()}
    if overwrite and pdir.exists():
        shutil.rmtree(pdir)
    if out.exists() and not pdir.exists():
        if not overwrite:
            raise ScoreError(f"{out} exists; pass --overwrite to score again")
        out.unlink()
    if pdir.exists():
        try:
            old = json.loads((pdir / META).read_text())
        except (OSError, ValueError):
            old = None
        if old != meta:
            raise ScoreError(
                f"{pdir} holds a run with a different input or options; pass --overwrite to start again"
            )
        return pdir, completed_rows(pdir), (pdir / DONE).exists()
    pdir.mkdir(parents=True)
    (pdir / META).write_text(json.dumps(meta, indent=2))
    return pdir, 0, False


def finish(pdir: Path, out: Path, opts: ScoreOptions) -> dict:
    """Merge the parts into OUT (atomically) and remove the parts folder."""
    n = merge_parts(pdir, out, opts)
    shutil.rmtree(pdir)
    return {"rows": n, "output": str(out)}


# -------------------------------------------------------------------------------------- run
Runner = Callable[[Iterator[dict], Callable[[pa.Table], None]], None]


def score_file(
    inp: str | Path,
    out: str | Path,
    opts: ScoreOptions | None = None,
    *,
    overwrite: bool = False,
    progress: bool = True,
    runner: Runner | None = None,
    window_rows: int | None = None,
    max_rows: int | None = None,
) -> dict:
    """Route every row of ``inp`` and write decisions to ``out``; resumes an interrupted run.

    ``runner`` consumes input batches and hands output tables to its callback (default: one Router in
    this process; router.score.ray_data passes a Ray Data runner). ``max_rows`` stops early (tests, benchmarks)
    leaving a resumable run."""
    inp, out, opts = Path(inp), Path(out), opts or ScoreOptions()
    pdir, start, done = prepare(inp, out, opts, overwrite)
    t0 = time.perf_counter()
    scored = 0
    if not done:
        total = count_rows(inp)
        batches = iter_input(inp, opts, start, window_rows or opts.chunk_rows)
        if max_rows is not None:
            batches = _limit(batches, max_rows)
        bar = _Progress(total, start, enabled=progress)

        def emit(table: pa.Table) -> None:
            nonlocal scored
            for off in range(0, table.num_rows, opts.chunk_rows):
                write_part(pdir, table.slice(off, opts.chunk_rows))
            scored += table.num_rows
            bar.advance(table.num_rows)

        with bar:
            (runner or LocalRunner(opts))(batches, emit)
        if max_rows is not None and scored >= max_rows:
            return {"rows": start + scored, "scored": scored, "stopped_early": True, "parts": str(pdir)}
        (pdir / DONE).write_text(json.dumps({"rows": start + scored}))
    elapsed = time.perf_counter() - t0
    summary = finish(pdir, out, opts)
    summary.update(
        scored_now=scored,
        resumed_from=start,
        seconds=round(elapsed, 3),
        messages_per_s=round(scored / elapsed, 1) if elapsed > 0 and scored else None,
    )
    return summary


def _limit(batches: Iterator[dict], max_rows: int) -> Iterator[dict]:
    n = 0
    for b in batches:
        if n >= max_rows:
            return
        if n + len(b["row"]) > max_rows:
            k = max_rows - n
            b = {key: v[:k] for key, v in b.items()}
        n += len(b["row"])
        yield b


class LocalRunner:
    """One Router in this process, one route_batch per chunk."""

    def __init__(self, opts: ScoreOptions) -> None:
        from router.routing import Router

        self.opts = opts
        self.router = Router.load(opts.model_dir, config=opts.config, threshold=opts.threshold)

    def __call__(self, batches: Iterator[dict], emit: Callable[[pa.Table], None]) -> None:
        for b in batches:
            emit(decisions_table(b, self.router, self.opts))


class _Progress:
    def __init__(self, total: int | None, start: int, enabled: bool) -> None:
        self.enabled = enabled
        self.total, self.start = total, start
        self._p = None

    def __enter__(self):
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._p = Progress(
                TextColumn("scoring"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]} msg/s"),
                TimeRemainingColumn(),
                transient=False,
            )
            self._p.__enter__()
            self._task = self._p.add_task("score", total=self.total, completed=self.start, rate="-")
            self._t0, self._n = time.perf_counter(), 0
        return self

    def advance(self, n: int) -> None:
        if self._p is not None:
            self._n += n
            rate = self._n / max(1e-9, time.perf_counter() - self._t0)
            self._p.update(self._task, advance=n, rate=f"{rate:,.0f}")

    def __exit__(self, *exc) -> None:
        if self._p is not None:
            self._p.__exit__(*exc)
