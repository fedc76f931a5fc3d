"""Runtime commands: serve, config check, schema. They need no training extra."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from router.console import (
    ModelDir,
    Opt,
    RouterConfigFile,
    Threshold,
    VerifierModel,
    VerifierURL,
    command,
    console,
    fail,
)


@command()
def config_check(
    path: Path | None = typer.Argument(None, help="Router config YAML (default: the packaged one)."),
    as_json: Annotated[bool, Opt("--json", help="Print the effective permissions as JSON.")] = False,
) -> None:
    """Load a router config strictly and print the effective roles -> skills -> permissions."""
    from router.rbac import check_config, format_permissions

    report = check_config(path)
    print(json.dumps(report, indent=2) if as_json else format_permissions(report))


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
    max_body_bytes: int = Opt(1_048_576, help="Larger request bodies get 413."),
    max_messages: int = Opt(64, help="More messages in one request get 422."),
    max_chars: int = Opt(10_000, help="Longer messages get 422."),
    inference_threads: int = Opt(0, help="Concurrent route() calls without a verifier; 0: one per core."),
    ort_threads: int = Opt(1, help="onnxruntime intra-op threads per call (0: all cores)."),
    verifier_url: VerifierURL = None,
    verifier_model: VerifierModel = None,
    verifier_timeout: Annotated[float | None, Opt(help="Seconds per verifier HTTP request.")] = None,
    graceful_timeout: float = Opt(30.0, help="Seconds to finish requests in flight on shutdown."),
    load_delay: float = Opt(0.0, hidden=True, help="Wait before loading the model (tests)."),
    log_level: str = Opt("info"),
) -> None:
    """Serve the router over HTTP (extra 'serve'): POST /v1/route, /healthz, /readyz, /metrics."""
    settings = {**locals(), "ort_threads": ort_threads or None}
    from router.serve import ServeSettings
    from router.serve.app import run

    try:
        run(ServeSettings(**settings))
    except ValueError as e:  # configuration: bad key file, address or limits
        raise fail(str(e), code=2) from None
