"""`intent-router gate`: the CI gate over an evaluation report and a committed baseline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import Opt, app, command, console, fail, table


@app.command()
@command()
def gate(
    report: Path = Opt(Path("reports/ci/eval.json"), help="eval.json written by 'intent-router eval'."),
    baseline: Path = Opt(Path("eval/baseline.json"), help="Committed baseline to compare with."),
    write_baseline: bool = Opt(
        False,
        "--write-baseline",
        help="Write BASELINE from REPORT with the default limits instead of gating.",
    ),
    as_json: Annotated[bool, Opt("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """CI gate: exit 1 when accuracy, macro-F1, a class F1, ECE, accepted accuracy, out-of-scope or compound-request figures regress past the baseline's limits."""
    from eval.reports.report_files import ReportError, load_report
    from eval.reports.gate import (
        GATE_COLUMNS,
        GateError,
        gate_notes,
        gate_passed,
        gate_rows,
        load_baseline,
        run_gate,
    )
    from eval.reports.gate import write_baseline as write_baseline_file

    try:
        rep = load_report(report)
        if write_baseline:
            write_baseline_file(rep, baseline)
            console.print(
                f"baseline written to [bold]{baseline}[/] from {report} ({rep['model']['model_id']})"
            )
            return
        base = load_baseline(baseline)
        checks = run_gate(rep, base)
    except (ReportError, GateError, KeyError) as e:
        raise fail(f"{e}" if not isinstance(e, KeyError) else f"report or baseline lacks {e}", code=2) from e
    passed, notes = gate_passed(checks), gate_notes(rep, base)
    if as_json:
        print(
            json.dumps(
                {"passed": passed, "checks": [ch.to_dict() for ch in checks], "notes": notes}, indent=2
            )
        )
        raise typer.Exit(0 if passed else 1)
    base_id = base.get("source", {}).get("model_id", baseline)
    table(f"Gate: {rep['model']['model_id']} vs baseline {base_id}", GATE_COLUMNS, gate_rows(checks))
    for note in notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    failed = [ch.name for ch in checks if not ch.passed]
    console.print("[green]gate passed[/]" if passed else f"[bold red]gate failed:[/] {', '.join(failed)}")
    raise typer.Exit(0 if passed else 1)
