"""Eval's commands: the CI gate, and the benchmarks of the server and of log scoring."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import Opt, command, console, fail, table


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
    from eval.gate import GATE_COLUMNS, GateError, gate_notes, gate_passed, gate_rows, load_baseline, run_gate
    from eval.gate import write_baseline as write_baseline_file
    from eval.report import ReportError, load_report

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


@command(extra="serve")
def bench_serve(
    rates: str = Opt("100,200,300,400,500", help="Open-loop requests/s to try."),
    seconds: float = Opt(8.0, help="Seconds per open-loop rate / closed-loop run."),
    sequential: int = Opt(500, help="Requests sent one at a time, each beside an in-process route()."),
    skip_faults: bool = Opt(False, "--skip-faults", help="Skip the 1,000 malformed requests."),
    server_args: str = Opt("", help="Extra `serve` arguments, e.g. --server-args='--ort-threads 2'."),
    data: Path = Opt(Path("data/test.jsonl"), help="JSONL messages to send."),
) -> dict:
    """Load-test `intent-router serve` on 127.0.0.1 (extra 'serve'): HTTP overhead, open- and closed-loop load, malformed requests."""
    from eval.bench_serve import run_bench_serve

    rate_list = [float(x) for x in rates.split(",")]
    result = run_bench_serve(rate_list, seconds, sequential, not skip_faults, server_args.split(), data)
    print(json.dumps(result, indent=2))
    return result


@command(extra="scale")
def bench_score(
    rows: int = Opt(20_000, help="Synthetic rows to score."),
    ray_workers: int = Opt(2, help="Ray actors for the --ray run; 0: skip the Ray run."),
    skip_local: bool = Opt(False, "--skip-local", help="Skip the local (one process) run."),
    window_rows: int = Opt(10_000, help="Rows per Ray window."),
    data: Path = Opt(Path("data"), help="Corpus folder: its train, dev and test JSONL give the messages."),
) -> dict:
    """Throughput of `intent-router score` on synthetic rows, locally and on a local Ray (extra 'scale')."""
    from eval.bench_score import run_bench_score

    result = run_bench_score(rows, ray_workers, skip_local, window_rows, data)
    print(json.dumps(result, indent=2))
    return result
