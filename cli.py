"""intent-router command line: a thin Typer layer over router/, training/ and eval/.

Each command parses arguments, calls one library function and prints; the work lives in the packages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(help="Train, export, evaluate and run the five-intent router.", no_args_is_help=True, add_completion=False)
data_app = typer.Typer(help="Corpus tools.", no_args_is_help=True)
app.add_typer(data_app, name="data")

console = Console()
err_console = Console(stderr=True)

DEFAULT_MODEL_DIR = Path(__file__).resolve().parent / "models" / "intent-minilm"


def _fail(message: str, code: int = 1) -> "typer.Exit":
    err_console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


# --------------------------------------------------------------------------------------- data
@data_app.command("check")
def data_check(
    paths: List[Path] = typer.Argument(None, help="JSONL files or directories (default: data/)."),
    strict: bool = typer.Option(False, "--strict", help="Treat duplicates within a split as errors too."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    max_issues: int = typer.Option(50, help="How many issues to print (all go into --json)."),
) -> None:
    """Validate corpus files: JSON, labels, empty text, duplicates and train/dev/test leakage."""
    from training.corpus import check_files

    paths = paths or [Path("data")]
    report = check_files(paths)
    errors = report.errors + (report.warnings if strict else [])
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        raise typer.Exit(1 if errors else 0)

    for issue in report.issues[:max_issues]:
        style = "red" if issue in errors else "yellow"
        console.print(f"[{style}]{issue}[/]", highlight=False)
    if len(report.issues) > max_issues:
        console.print(f"... {len(report.issues) - max_issues} more (use --json for all)")

    balance = report.class_balance()
    labels = sorted({l for c in balance.values() for l in c})
    t = Table(title="Class balance")
    t.add_column("split")
    for l in labels:
        t.add_column(l, justify="right")
    t.add_column("total", justify="right")
    for split, counts in balance.items():
        t.add_row(split, *[str(counts.get(l, 0)) for l in labels], str(sum(counts.values())))
    console.print(t)

    stats = report.length_stats()
    t = Table(title="Length (words)")
    cols = ["rows", "min_words", "median_words", "mean_words", "p90_words", "max_words", "share_le_4_words", "share_ge_25_words"]
    t.add_column("split")
    for c in cols:
        t.add_column(c.replace("_words", "").replace("share_", ""), justify="right")
    for split, s in stats.items():
        t.add_row(split, *[str(s[c]) for c in cols])
    console.print(t)
    console.print(
        f"{len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        + (" [strict: warnings count as errors]" if strict else "")
    )
    raise typer.Exit(1 if errors else 0)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app()


if __name__ == "__main__":
    main()
