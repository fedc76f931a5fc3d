"""Corpus commands: data check (training.corpus.labelled) and data add (training.corpus.merge), which
merges reviewed rows into a training file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import Opt, command, console, data_app, fail, table


@data_app.command("add")
@command()
def data_add(
    reviewed: Path = typer.Argument(
        ...,
        help="Reviewed rows: JSONL or CSV with a header, each with 'text' and 'label', or a Label Studio "
        "export (.json) of the tasks `review --label-studio` wrote.",
    ),
    to: Path = Opt(..., "--to", help="Training file (JSONL) to add the rows to; created if missing."),
    source: str | None = Opt(
        None, "--source", help="Name stored in each added row's 'source' (default: REVIEWED's file stem)."
    ),
    data_dir: Path | None = Opt(
        None,
        "--data-dir",
        help="Corpus directory (default: the folder of --to when it holds a dev or test file, else data/): rows overlapping its dev, test, blind, oos, "
        "compound/ or conversations/ files are skipped; its train.jsonl gives the labels when --to has none.",
    ),
    new_label: list[str] = Opt(
        None, "--new-label", help="Accept this label though the target's label set lacks it; repeatable."
    ),
    dry_run: bool = Opt(False, "--dry-run", help="Check and report; write nothing."),
    keep_existing: bool = Opt(
        False,
        "--keep-existing",
        help="On a conflicting label keep the training file's, leave the reviewed row out, and add the rest "
        "(without it a conflict is an error: nothing written, exit 1).",
    ),
    as_json: Annotated[bool, Opt("--json", help="Print the summary as JSON.")] = False,
    max_issues: int = Opt(50, help="How many skipped rows and errors to print (all go into --json)."),
) -> None:
    """Add reviewed rows to a training file: schema and label checks, duplicates and near-duplicates
    removed, rows overlapping an evaluation file refused, provenance ('source', 'added') in each row.
    Any error: nothing written, exit 1."""
    from training.corpus.merge import add_reviewed

    report = add_reviewed(
        reviewed,
        to,
        source=source,
        data_dir=data_dir,
        new_labels=new_label or (),
        dry_run=dry_run,
        keep_existing=keep_existing,
    )
    if as_json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
        raise typer.Exit(1 if report.errors else 0)
    issues = [("red", f"error: {e}") for e in report.errors]
    issues += [("yellow", f"skipped ({s.reason}): {reviewed}:{s.line}: {s.detail}") for s in report.skipped]
    issues += [("yellow", f"warning: {w}") for w in report.warnings]
    for colour, line in issues[:max_issues]:
        console.print(f"[{colour}]{escape(line)}[/]", highlight=False)
    if len(issues) > max_issues:
        console.print(f"... {len(issues) - max_issues} more (use --json for all)")
    table(
        f"{reviewed} -> {to} (source {report.source!r}, added {report.added_date})",
        ["", "rows"],
        report.summary_rows(),
    )
    if report.errors:
        raise fail(f"{len(report.errors)} error(s) in {reviewed}; nothing written to {to}")
    if report.written:
        console.print(f"added {len(report.rows)} row(s) to [bold]{escape(str(to))}[/]", highlight=False)
    elif dry_run:
        console.print(f"dry run: {len(report.rows)} row(s) would be added; nothing written", highlight=False)
    else:
        console.print(f"no rows to add; {escape(str(to))} unchanged", highlight=False)


@data_app.command("check")
@command()
def data_check(
    paths: list[Path] = typer.Argument(None, help="JSONL files or directories (default: data/)."),
    strict: bool = Opt(False, "--strict", help="Treat duplicates within a split as errors too."),
    as_json: Annotated[bool, Opt("--json", help="Print the report as JSON.")] = False,
    max_issues: int = Opt(50, help="How many issues to print (all go into --json)."),
) -> None:
    """Validate corpus files: JSON, labels, empty text, duplicates and train/dev/test leakage."""
    from training.corpus.labelled import check_files

    report = check_files(paths or [Path("data")])
    errors = report.errors + (report.warnings if strict else [])
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        raise typer.Exit(1 if errors else 0)
    for issue in report.issues[:max_issues]:
        console.print(f"[{'red' if issue in errors else 'yellow'}]{escape(str(issue))}[/]", highlight=False)
    if len(report.issues) > max_issues:
        console.print(f"... {len(report.issues) - max_issues} more (use --json for all)")
    for title, header, rows in report.tables():
        table(title, header, rows)
    console.print(
        f"{len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        + (" (strict: warnings count as errors)" if strict else "")
    )
    raise typer.Exit(1 if errors else 0)
