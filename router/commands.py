"""Runtime commands: route, score, serve, config check, schema. They need no training extra.

Router uses nothing of eval's, so cli.py fills ``extensions`` with the two pieces of eval they use:
``route --file`` reads messages through eval's data loader, ``score --with-labels`` prints eval's
metrics of the decisions it wrote.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Annotated

import typer

from router.console import (
    ModelDir,
    Opt,
    RouterConfigFile,
    TextColumn,
    Threshold,
    VerifierModel,
    VerifierTimeout,
    VerifierURL,
    app,
    command,
    config_app,
    console,
    fail,
    make_verifier,
)
from router.serve import options as so

MessageReader = Callable[[Path], list[str]]
"""Messages to route from a file, or from stdin for '-'."""
LabelMetrics = Callable[[Path, Sequence[str]], dict]
"""Metrics of a decisions file written with --with-labels, given the model's labels."""


@dataclass
class Extensions:
    """What two runtime commands borrow from eval, set by cli.py: without them, ``route --file`` and
    ``score --with-labels`` say which extra they need."""

    read_messages: MessageReader | None = None
    label_metrics: LabelMetrics | None = None


extensions = Extensions()


@config_app.command("check")
@command()
def config_check(
    path: Path | None = typer.Argument(None, help="Router config YAML (default: the packaged one)."),
    as_json: Annotated[bool, Opt("--json", help="Print the effective permissions as JSON.")] = False,
) -> None:
    """Load a router config strictly and print the effective roles -> skills -> permissions."""
    from router.rbac import check_config, format_permissions

    report = check_config(path)
    print(json.dumps(report, indent=2) if as_json else format_permissions(report))


@app.command()
@command()
def schema(
    out: Path = Opt(Path("router/schema/decision.schema.json"), help="Where to write the JSON Schema."),
    model_dir: Annotated[
        Path | None,
        Opt("--model", help="Model directory: the schema's intent fields are an enum of its intents."),
    ] = None,
) -> None:
    """Write the JSON Schema of the routing Decision: intents are any string, or, with --model, that
    model's intents."""
    from router.decision import write_json_schema
    from router.intents import intents_of
    from router.manifest import load_manifest

    intents = intents_of(load_manifest(model_dir).labels) if model_dir is not None else None
    write_json_schema(out, intents)
    console.print(f"wrote {out}" + (f" (intents: {', '.join(intents)})" if intents else ""))


@app.command()
@command(extra="serve")
def serve(
    host: so.Host = "127.0.0.1",
    port: so.Port = 8080,
    key_file: so.KeyFile = None,
    model_dir: ModelDir = None,
    config: RouterConfigFile = None,
    threshold: Threshold = None,
    max_body_bytes: so.MaxBodyBytes = None,
    max_messages: so.MaxMessages = None,
    max_chars: so.MaxChars = None,
    inference_threads: so.InferenceThreads = 0,
    ort_threads: so.OrtThreads = 1,
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: so.ServeVerifierTimeout = None,
    graceful_timeout: so.GracefulTimeout = 30.0,
    keep_alive_timeout: so.KeepAliveTimeout = 75.0,
    workers: so.Workers = 1,
    max_connection_age: so.MaxConnectionAge = None,
    decision_log: so.DecisionLog = None,
    decision_log_format: so.DecisionLogFormat = "jsonl",
    decision_log_redact: so.DecisionLogRedact = None,
    golden: so.Golden = None,
    golden_min_accuracy: so.GoldenMinAccuracy = 0.9,
    golden_min_agreement: so.GoldenMinAgreement = 0.8,
    reload_compare: so.ReloadCompare = None,
    tools: so.Tools = None,
    ray: so.Ray = False,
    replicas: so.Replicas = 2,
    max_replicas: so.MaxReplicas = None,
    ray_address: so.RayAddress = None,
    otel: so.Otel = False,
    load_delay: so.LoadDelay = 0.0,
    log_level: so.LogLevel = "info",
) -> None:
    """Serve the router over HTTP (extra 'serve'): POST /v1/route, POST /admin/reload, /healthz, /readyz,
    /metrics; SIGHUP reloads the model and config."""
    on_ray = {"replicas": replicas, "max_replicas": max_replicas, "address": ray_address}
    settings = {**locals(), "ort_threads": ort_threads or None}
    for name in ("ray", "replicas", "max_replicas", "ray_address", "on_ray"):
        settings.pop(name)
    from router.serve import ServeSettings

    try:
        if ray:
            from router.serve.ray_app import check_ray, run_on_ray

            check_ray(workers, max_replicas, replicas)
            code = run_on_ray(ServeSettings(**settings), **on_ray)
        else:
            from router.serve.workers import run

            code = run(ServeSettings(**settings))
    except ValueError as e:  # configuration: bad key file, address, limits or decision log
        raise fail(str(e), code=2) from None
    if code:
        raise typer.Exit(code)


@app.command()
@command()
def route(
    texts: list[str] = typer.Argument(None, help="Message(s) to route."),
    role: str = Opt("viewer", help="Caller's role (RBAC)."),
    context: str | None = Opt(
        None,
        help="The previous message of the conversation: a continuation ('same for staging') is read with it.",
    ),
    file: Path | None = Opt(
        None,
        "--file",
        "-f",
        help="Route every line of a file ('-' for stdin); JSONL rows use their 'text'.",
    ),
    model: ModelDir = None,
    config: RouterConfigFile = None,
    threshold: Threshold = None,
    variant: str | None = Opt(
        None, help="Graph variant: int8, fp16 or fp32 (default: the model's default variant)."
    ),
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: VerifierTimeout = None,
    tools: Annotated[
        Path | None, Opt(help="Tool registry YAML: each decision gets the few tools of its skills it needs.")
    ] = None,
    as_json: Annotated[bool, Opt("--json", help="Print full decisions as JSON (one line each).")] = False,
) -> None:
    """Route messages: intent, confidence, granted and denied skills (and tools, with --tools)."""
    from router.config import RouterConfig
    from router.routing import Router
    from router.tools.registry import ToolRegistryError

    messages = (_read_messages(file) if file is not None else []) + list(texts or [])
    if not messages:
        raise fail("give a message, or --file FILE / --file - for stdin", code=2)
    cfg = RouterConfig.load(config)
    verifier = make_verifier(verifier_url, verifier_model, verifier_timeout, cfg)
    try:
        router = Router.load(
            model, config=cfg, verifier=verifier, threshold=threshold, variant=variant, tools=tools
        )
    except ToolRegistryError as e:
        raise fail(str(e), code=2) from None
    decisions = (
        router.route_batch(messages, role, context=context)
        if verifier is None
        else [router.route(m, role, context=context) for m in messages]
    )
    if as_json or len(messages) > 1:
        for d in decisions:
            print(d.model_dump_json(exclude_none=False) if as_json else json.dumps(d.brief()))
        return
    _print_decision(decisions[0])


def _print_decision(d) -> None:
    """One decision: its brief as one JSON line, then its tools, denied skills and message for people."""
    print(json.dumps(d.brief()))  # one JSON line, never wrapped, whatever the terminal's width
    if d.tools is not None:
        picked = ", ".join(
            f"{t.name}{' (confirm)' if t.requires_confirmation else ''}" for t in d.tools.tools
        )
        console.print(
            f"  tools: {picked or 'none applies'} ({d.tools.tokens_saved} tokens saved)", highlight=False
        )
    for x in d.denied:
        console.print(f"  denied {x.skill}{' (required)' if x.required else ''}: {x.reason}", highlight=False)
    if d.message:
        console.print(f"  {d.message}", highlight=False)


@app.command()
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
    from router.score.options import ScoreOptions, model_labels
    from router.score.run import score_file

    values = {f.name: args[f.name] for f in fields(ScoreOptions)}
    opts = ScoreOptions(**{k: str(v) if isinstance(v, Path) else v for k, v in values.items()})
    common = dict(overwrite=overwrite, progress=not quiet, max_rows=max_rows)
    if ray:
        from router.score.ray_data import score_file_ray

        summary = score_file_ray(input, out, opts, address=ray_address or None, workers=workers, **common)
    else:
        summary = score_file(input, out, opts, **common)
    if opts.with_labels and "output" in summary:  # a run stopped early has no output to measure
        summary["metrics"] = _label_metrics()(out, model_labels(opts.model_dir))
    print(json.dumps(summary))


def _read_messages(file: Path) -> list[str]:
    if extensions.read_messages is None:
        raise fail("route --file reads files through eval's data loader: run it from the intent-router CLI")
    return extensions.read_messages(file)


def _label_metrics() -> LabelMetrics:
    if extensions.label_metrics is None:
        raise fail("score --with-labels measures through eval: run it from the intent-router CLI")
    return extensions.label_metrics
