"""Commands over files of messages: route (a few, interactively), score (a log, in bulk), gate (CI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import (
    ModelDir,
    Opt,
    RouterConfigFile,
    TextColumn,
    Threshold,
    VerifierModel,
    VerifierTimeout,
    VerifierURL,
    command,
    console,
    fail,
    make_verifier,
    table,
)


@command()
def route(
    texts: list[str] = typer.Argument(None, help="Message(s) to route."),
    role: str = Opt("viewer", help="Caller's role (RBAC)."),
    context: str | None = Opt(
        None,
        help="The previous message of the conversation: a continuation ('same for staging') is read with it.",
    ),
    file: Path | None = Opt(
        None, "--file", "-f", help="Route every line of a file ('-' for stdin); JSONL rows use their 'text'."
    ),
    model: ModelDir = None,
    config: RouterConfigFile = None,
    threshold: Threshold = None,
    variant: str | None = Opt(None, help="Graph variant: int8 (default) or fp32."),
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: VerifierTimeout = None,
    as_json: Annotated[bool, Opt("--json", help="Print full decisions as JSON (one line each).")] = False,
) -> None:
    """Route messages: intent, confidence, granted and denied skills."""
    from eval.data import load_messages
    from router.config import RouterConfig
    from router.routing import Router

    messages = (load_messages(file) if file is not None else []) + list(texts or [])
    if not messages:
        raise fail("give a message, or --file FILE / --file - for stdin", code=2)
    cfg = RouterConfig.load(config)
    verifier = make_verifier(verifier_url, verifier_model, verifier_timeout, cfg)
    router = Router.load(model, config=cfg, verifier=verifier, threshold=threshold, variant=variant)
    decisions = (
        router.route_batch(messages, role, context=context)
        if verifier is None
        else [router.route(m, role, context=context) for m in messages]
    )
    if as_json or len(messages) > 1:
        for d in decisions:
            print(d.model_dump_json(exclude_none=False) if as_json else json.dumps(d.brief()))
        return
    d = decisions[0]
    console.print(json.dumps(d.brief()), highlight=False)
    for x in d.denied:
        console.print(f"  denied {x.skill}{' (required)' if x.required else ''}: {x.reason}", highlight=False)
    if d.message:
        console.print(f"  {d.message}", highlight=False)


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


RUN_OPTIONS = ("input", "out", "ray", "ray_address", "workers", "overwrite", "max_rows", "quiet")


@command(extra="scale")
def score(
    input: Path = typer.Argument(..., help="JSONL / CSV / TSV / Parquet file of messages."),
    out: Path = Opt(..., "--out", "-o", help="Decisions: .parquet or .jsonl."),
    role: str = Opt("viewer", help="Role to route for (RBAC)."),
    text_column: TextColumn = "text",
    label_column: Annotated[str, Opt(help="Column with the true intent (--with-labels).")] = "label",
    id_column: str | None = Opt(None, help="Column copied to the output as 'id'."),
    context_column: str | None = Opt(
        None, help="Column with the previous message of a conversation: a continuation is read with it."
    ),
    with_labels: bool = Opt(False, "--with-labels", help="Add accuracy and the confusion matrix."),
    skip_invalid: bool = Opt(False, "--skip-invalid", help="Write invalid rows with an 'error'."),
    keep_text: bool = Opt(False, "--keep-text", help="Copy the message into the output."),
    model_dir: ModelDir = None,
    config: RouterConfigFile = None,
    threshold: Threshold = None,
    ray: bool = Opt(False, "--ray", help="Run the routing on Ray Data (extra 'scale')."),
    ray_address: str | None = Opt(
        None,
        envvar="RAY_ADDRESS",
        help="Ray cluster to join (e.g. ray://head:10001); none: start a local Ray.",
    ),
    workers: int = Opt(2, help="Ray actors (one Router each)."),
    chunk_rows: int = Opt(2048, help="Rows per part file: the most a crash makes you score again."),
    overwrite: bool = Opt(False, "--overwrite", help="Discard earlier output or parts."),
    max_rows: int | None = Opt(None, hidden=True, help="Stop after N rows (tests, benchmarks)."),
    quiet: bool = Opt(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Route every message of a file and write the decisions; resumes after a crash (docs/score.md)."""
    args = dict(locals())
    run = {k: args.pop(k) for k in RUN_OPTIONS}
    from eval.score import ScoreOptions, score_file

    opts = ScoreOptions(**{k: str(v) if isinstance(v, Path) else v for k, v in args.items()})
    common = dict(overwrite=run["overwrite"], progress=not run["quiet"], max_rows=run["max_rows"])
    if run["ray"]:
        from eval.score_ray import score_file_ray

        address, workers = run["ray_address"] or None, run["workers"]
        summary = score_file_ray(run["input"], run["out"], opts, address=address, workers=workers, **common)
    else:
        summary = score_file(run["input"], run["out"], opts, **common)
    print(json.dumps(summary))
