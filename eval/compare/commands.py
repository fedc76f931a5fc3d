"""The challenger gate command: compare a candidate model with the incumbent (the running model) on the same
labelled messages and exit 0 when the candidate passes, 1 when it fails, 2 when the input is bad."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import Opt, RouterConfigFile, app, command, console, fail, say, table


@app.command()
@command()
def compare(
    candidate: Path = Opt(..., help="Exported model directory of the challenger."),
    incumbent: Path = Opt(..., help="Exported model directory of the running model."),
    data: list[str] = Opt(
        ..., help="Labelled messages ({text, label} rows: JSONL/CSV/TSV/Parquet); repeat for several files."
    ),
    config: RouterConfigFile = None,
    candidate_config: Annotated[
        Path | None, Opt(help="Router config of the candidate (default: --config), for a label change.")
    ] = None,
    margin: float = Opt(0.0, help="Accuracy the candidate may lose, in accuracy units (0.01 = one point)."),
    alpha: float = Opt(
        0.05, help="A candidate with more errors (n01 > n10) fails when McNemar's exact p is below this."
    ),
    confident_tolerance: float = Opt(
        1.0, help="Extra confident mistakes (wrong and accepted at the threshold) allowed per 1000 messages."
    ),
    max_p50_ratio: float = Opt(
        1.5, help="The candidate's route() p50 may be at most this many times the incumbent's (0: no check)."
    ),
    max_p99_ratio: float = Opt(2.0, help="The same for p99, checked on 100 messages or more (0: no check)."),
    allow_label_change: bool = Opt(
        False, "--allow-label-change", help="Compare models whose labels differ on the labels they share."
    ),
    out: Path = Opt(Path("reports/compare"), help="Directory for compare.json and compare.md."),
    as_json: Annotated[bool, Opt("--json", help="Print compare.json instead of the tables.")] = False,
) -> None:
    """Challenger gate: accuracy, confident mistakes, latency and McNemar's test of a candidate against
    the incumbent; exit 0 pass, 1 fail, 2 bad input."""
    from eval.compare.figures import CompareError, Rule
    from eval.compare.report import (
        check_rows,
        class_rows,
        compare_models,
        figure_rows,
        notes,
        paired_rows,
        write_compare,
    )

    try:
        result = compare_models(
            candidate,
            incumbent,
            data,
            config=config,
            candidate_config=candidate_config,
            rule=Rule(
                margin=margin,
                alpha=alpha,
                confident_tolerance=confident_tolerance,
                max_p50_ratio=max_p50_ratio,
                max_p99_ratio=max_p99_ratio,
            ),
            allow_label_change=allow_label_change,
            report=(lambda _: None) if as_json else say,
        )
    except CompareError as e:
        raise fail(str(e), code=2) from e
    paths = write_compare(result, out)
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        raise typer.Exit(0 if result["passed"] else 1)
    n = result["data"]["n"]
    table(f"{n} messages", ["", "incumbent", "candidate", "delta"], figure_rows(result))
    table("Paired errors", ["", "value"], paired_rows(result))
    table(
        "Per class (recall; F1 per intent and for the no-intent answer)",
        ["label", "n", "recall inc", "recall cand", "delta", "F1 inc", "F1 cand", "delta"],
        class_rows(result),
    )
    table("Checks", ["check", "result", "detail"], check_rows(result))
    for note in notes(result):
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    console.print(f"rule: {escape(result['rule']['text'])}", highlight=False)
    failed = [c["name"] for c in result["checks"] if not c["passed"]]
    console.print(
        "[green]candidate passes[/]"
        if result["passed"]
        else f"[bold red]candidate fails:[/] {', '.join(failed)}"
    )
    console.print(f"wrote {paths['json']} and {paths['markdown']}", highlight=False)
    raise typer.Exit(0 if result["passed"] else 1)


@app.command()
@command()
def replay(
    log: Path = typer.Argument(
        ..., help="Decision log: a file, or the directory `serve --decision-log` wrote."
    ),
    candidate: Path = Opt(..., help="Exported model directory to route the logged messages with."),
    incumbent: Annotated[
        Path | None,
        Opt(
            help="The model serving, routed again as the 'before' side (default: what the log says was served)."
        ),
    ] = None,
    config: RouterConfigFile = None,
    limit: Annotated[int | None, Opt(min=1, help="Replay at most this many records, oldest first.")] = None,
    max_flip_rate: float = Opt(
        0.0, min=0.0, max=1.0, help="Exit 1 when more than this share of answers change (0: no check)."
    ),
    out: Path = Opt(Path("reports/replay"), help="Directory for replay.json and replay.md."),
    as_json: Annotated[bool, Opt("--json", help="Print replay.json instead of the tables.")] = False,
) -> None:
    """Replay logged traffic through a candidate, with no labels: flips with examples, the shift in the
    intent mix, confident disagreements and latency; exit 1 above --max-flip-rate, 2 on bad input."""
    from eval.compare.figures import CompareError
    from eval.compare.replay import replay_log, write_replay

    try:
        result = replay_log(
            log,
            candidate,
            incumbent=incumbent,
            config=config,
            limit=limit,
            report=(lambda _: None) if as_json else say,
        )
    except CompareError as e:
        raise fail(str(e), code=2) from e
    paths = write_replay(result, out)
    failed = bool(max_flip_rate) and result["flip_rate"] > max_flip_rate
    if as_json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
        raise typer.Exit(1 if failed else 0)
    _print_replay(result)
    if failed:
        console.print(f"[bold red]flip rate {result['flip_rate']:.4f} is above {max_flip_rate:g}[/]")
    console.print(f"wrote {paths['json']} and {paths['markdown']}", highlight=False)
    raise typer.Exit(1 if failed else 0)


def _print_replay(result: dict) -> None:
    n = result["messages"]
    before = "the log" if result["before"] == "log" else "the incumbent"
    say(
        f"{result['models']['candidate']} on {n} logged messages (before: {before}): "
        f"{result['flipped']} flipped ({100 * result['flip_rate']:.1f}%), "
        f"{result['confident_disagreements']} confident disagreements"
    )
    if "log_agreement" in result:
        say(f"the incumbent, routed again, gives what was served for {100 * result['log_agreement']:.1f}%")
    for k, v in result["left_out"].items():
        say(f"left out: {k} {v}")
    rows = [
        [k["before"], k["after"], k["count"], escape(k["examples"][0]["message"])] for k in result["kinds"]
    ]
    table("Flips (before -> after)", ["before", "after", "messages", "e.g."], rows)
    shift = [
        [r["name"], f"{100 * r['before']:.1f}%", f"{100 * r['after']:.1f}%", f"{r['shift_points']:+.1f}"]
        for r in result["intent_mix"]
    ]
    table("Intent mix", ["intent", "before", "after", "shift (points)"], shift)
    lat = [[key, m["p50"], m["p90"], m["p99"]] for key, m in result["latency_ms"].items()]
    table("route() ms", ["model", "p50", "p90", "p99"], lat)
