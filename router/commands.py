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
    host: str = Opt("127.0.0.1", help="Address to listen on; non-loopback needs --key-file."),
    port: int = Opt(8080, help="TCP port."),
    key_file: Path | None = Opt(
        None, envvar="INTENT_ROUTER_KEY_FILE", help="YAML/JSON: API key sha256 -> roles (docs/serve.md)."
    ),
    model_dir: ModelDir = None,
    config: RouterConfigFile = None,
    threshold: Threshold = None,
    max_body_bytes: Annotated[
        int | None, Opt(help="Larger request bodies get 413 (default: the config's limits, else 1048576).")
    ] = None,
    max_messages: Annotated[
        int | None, Opt(help="More messages in one request get 422 (default: the config's limits, else 64).")
    ] = None,
    max_chars: Annotated[
        int | None, Opt(help="Longer messages get 422 (default: the config's max_message_chars, else 10000).")
    ] = None,
    inference_threads: int = Opt(0, help="Concurrent route() calls without a verifier; 0: one per core."),
    ort_threads: int = Opt(1, help="onnxruntime intra-op threads per call (0: all cores)."),
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: Annotated[float | None, Opt(help="Seconds per verifier HTTP request.")] = None,
    graceful_timeout: float = Opt(30.0, help="Seconds to finish requests in flight on shutdown."),
    keep_alive_timeout: float = Opt(
        75.0,
        help="Seconds an idle keep-alive connection stays open; keep it above your clients' and proxies'.",
    ),
    workers: int = Opt(1, help="Server processes, each with its own model; N > 1: N processes on one port."),
    max_connection_age: Annotated[
        float | None,
        Opt(
            help="Seconds a keep-alive connection lives before a response closes it, so a worker started "
            "later gets its share (default: 30 with --workers N > 1, else off; 0: off)."
        ),
    ] = None,
    decision_log: Annotated[
        Path | None, Opt(help="Record every routed message and its decision in this directory.")
    ] = None,
    decision_log_format: str = Opt("jsonl", help="Decision log files: jsonl or parquet (extra 'scale')."),
    decision_log_redact: Annotated[
        str | None, Opt(help="module:function applied to every message before it is logged.")
    ] = None,
    golden: Annotated[
        Path | None,
        Opt(
            help="Labelled JSONL every load and reload must route right (default: the packaged set, for "
            "a model of the shipped intents)."
        ),
    ] = None,
    golden_min_accuracy: float = Opt(0.9, help="Share of the golden set a model must route right."),
    golden_min_agreement: float = Opt(
        0.8, help="At a reload, share of the golden set routed as the serving model routes it."
    ),
    reload_compare: Annotated[
        Path | None,
        Opt(
            help="compare.json a reload that changes the model must pass: `intent-router compare` of the "
            "serving model (incumbent) against the new one (candidate), read again at each reload; an "
            "admin reload's 'compare_report' names another."
        ),
    ] = None,
    tools: Annotated[
        Path | None,
        Opt(
            help="Tool registry YAML: each decision gets the few tools it needs; read again at every reload."
        ),
    ] = None,
    ray: bool = Opt(
        False,
        "--ray",
        help="Serve as replicas on Ray Serve (extra 'ray-serve') instead of worker processes.",
    ),
    replicas: int = Opt(2, min=1, help="With --ray: replicas (the minimum, with --max-replicas)."),
    max_replicas: Annotated[
        int | None, Opt(min=1, help="With --ray: scale up to this many replicas as requests queue.")
    ] = None,
    ray_address: Annotated[
        str | None,
        Opt(help="With --ray: the cluster to join ('auto': the local node's); default: start one."),
    ] = None,
    otel: bool = Opt(
        False,
        "--otel",
        help="Export OpenTelemetry traces over OTLP/HTTP (extra 'otel'): a span per request and per routed "
        "message, with its stages; the endpoint comes from OTEL_EXPORTER_OTLP_ENDPOINT.",
    ),
    load_delay: float = Opt(0.0, hidden=True, help="Wait before loading the model (tests)."),
    log_level: str = Opt("info"),
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
    d = decisions[0]
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
