"""The `review` command: a labelling queue from a decision log (eval.review.queue, eval/README.md)."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import typer

from router.console import (
    ModelDir,
    Opt,
    RouterConfigFile,
    VerifierModel,
    VerifierTimeout,
    VerifierURL,
    app,
    command,
    console,
    fail,
    make_verifier,
    say,
    table,
)

HeldOut = Callable[[Path], Callable[[str], bool]]  # data dir -> whether a message is an evaluation row's


@dataclass
class Extensions:
    """What `review` borrows from training, set by cli.py: ``held_out(data_dir)`` says which messages the
    corpus's evaluation files hold (training.corpus.merge.held_out: the rows `data add` would refuse as
    leaks), which the queue leaves out."""

    held_out: HeldOut | None = None


extensions = Extensions()


@app.command()
@command()
def review(
    log: Path = typer.Argument(
        ..., help="Decision log: a file, or the directory `serve --decision-log` wrote."
    ),
    budget: int = Opt(..., "--budget", help="Rows to pick: the messages a person has time to label."),
    out: Path = Opt(..., "--out", help="Where to write the queue."),
    model: ModelDir = None,
    config: RouterConfigFile = None,
    confident_share: float = Opt(
        0.1, help="Share of the budget drawn at random from confidently accepted decisions."
    ),
    seed: int = Opt(0, help="Seed of the confident slice and of the clustering."),
    fmt: Annotated[str, Opt("--format", help="Queue format: jsonl or csv.")] = "jsonl",
    label_studio: Annotated[
        Path | None, Opt("--label-studio", help="Also write Label Studio import tasks (JSON) here.")
    ] = None,
    data_dir: Annotated[
        Path | None,
        Opt(
            "--data-dir",
            help="Corpus whose evaluation files (dev, test, blind, oos, compound/, conversations/) the "
            "queue leaves out, as `data add` would refuse them (default: data/ when it exists).",
        ),
    ] = None,
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: VerifierTimeout = None,
) -> None:
    """Pick the logged messages worth labelling: unsure, disputed or borderline decisions and a slice of
    confident ones, deduplicated and spread over clusters of the model's embedding."""
    from eval.review.queue import select
    from eval.review.queue_files import (
        model_embedder,
        pre_label,
        row_of,
        write_label_studio,
        write_queue,
    )
    from router.config import RouterConfig
    from router.routing import Router

    _check_options(budget, confident_share, fmt, data_dir)
    records = _records(log)
    cfg = RouterConfig.load(config)
    verifier = make_verifier(verifier_url, verifier_model, verifier_timeout, cfg)
    router = Router.load(model, config=cfg, verifier=verifier)
    clf = router.classifier
    spec = clf.manifest.compound

    corpus = data_dir if data_dir is not None else (Path("data") if Path("data").is_dir() else None)
    left_out = Counter()
    kept = _without_held_out(records, corpus, left_out)
    try:
        sel = select(kept, budget, model_embedder(clf), confident_share, seed, spec)
    except ValueError as e:  # a malformed record further on
        raise fail(str(e), code=2) from None
    labels = pre_label(sel.picked, clf, verifier) if verifier is not None else None
    rows = [row_of(e, verifier is not None) for e in sel.picked]
    write_queue(rows, out, fmt)
    if label_studio is not None:
        write_label_studio(rows, label_studio)

    _print_summary(sel, log, corpus, left_out["held"], clf.model_id)
    if labels is not None:
        console.print(
            f"llm labels: {labels['from_log']} from the log, {labels['asked']} asked, {labels['failed']} failed",
            highlight=False,
        )
    wrote = f"wrote {len(rows)} rows to {out} ({fmt})"
    console.print(
        wrote + (f", Label Studio tasks to {label_studio}" if label_studio else ""), highlight=False
    )


def _check_options(budget: int, confident_share: float, fmt: str, data_dir: Path | None) -> None:
    from eval.review.queue_files import FORMATS

    if budget < 1:
        raise fail(f"--budget must be at least 1, got {budget}", code=2)
    if not 0.0 <= confident_share <= 1.0:
        raise fail(f"--confident-share must be in [0, 1], got {confident_share}", code=2)
    if fmt not in FORMATS:
        raise fail(f"--format must be one of {', '.join(FORMATS)}, got {fmt!r}", code=2)
    if data_dir is not None and not data_dir.is_dir():
        raise fail(f"{data_dir}: data directory not found", code=2)


def _records(log: Path) -> Iterator[dict]:
    """The log's records, the first read now so that a missing or empty log fails before the model loads."""
    from eval.review.queue import ReviewError
    from eval.review.queue_files import read_records

    try:
        records = read_records(log)
        first = next(records, None)  # read_records checks the path at its first record
        if first is None:
            raise ReviewError(f"{log}: the decision log has no records")
    except ValueError as e:  # ReviewError, or a malformed record (file and line)
        raise fail(str(e), code=2) from None
    return itertools.chain([first], records)


def _without_held_out(records: Iterator[dict], corpus: Path | None, left_out: Counter) -> Iterator[dict]:
    """The records whose message is not in the corpus's evaluation files (counted in ``left_out["held"]``)."""
    is_held = extensions.held_out(corpus) if corpus is not None and extensions.held_out else None
    for r in records:
        text = r.get("message")
        if is_held is not None and isinstance(text, str) and is_held(text):
            left_out["held"] += 1
            continue
        yield r


def _print_summary(sel, log: Path, corpus: Path | None, held: int, model_id: str) -> None:
    from eval.review.queue import PRIORITY

    c = sel.counts()
    say(
        f"read {c['records']} records of {log}: {c['unique']} unique messages, {c['duplicates']} duplicates removed"
    )
    if c["skipped"]:
        say(f"{c['skipped']} records without a text message left out")
    if held:
        say(f"{held} records left out: their message is in an evaluation file of {corpus}")
    others = sorted(set(sel.scan.model_ids) - {model_id} - {None})
    if others:
        say(f"note: the log holds decisions of {', '.join(others)}; --model is {model_id}")
    why_rows = [[w, c["candidates_by_why"].get(w, 0), c["picked_by_why"].get(w, 0)] for w in PRIORITY]
    table(
        f"Review queue: {c['picked']} of {c['candidates']} candidates",
        ["why", "candidates", "picked"],
        why_rows,
    )
    vectors = {"embedding": "the model's sentence embedding", "ranking": "the ranking vectors"}
    console.print(
        f"confident slice: {sel.sample} drawn from {c['confident_pool']} confidently accepted messages; "
        f"picks span {c['clusters_picked']} of {c['clusters']} clusters ({vectors.get(c['vectors'], 'none')})",
        highlight=False,
    )
