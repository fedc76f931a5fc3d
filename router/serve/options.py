"""The options of ``intent-router serve``, as annotated types: the command's signature names each option
and its default, and the help text lives here (router.commands.serve)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from router.console import Opt

Host = Annotated[str, Opt(help="Address to listen on; non-loopback needs --key-file.")]
Port = Annotated[int, Opt(help="TCP port.")]
KeyFile = Annotated[
    Path | None,
    Opt(envvar="INTENT_ROUTER_KEY_FILE", help="YAML/JSON: API key sha256 -> roles (docs/serve.md)."),
]
MaxBodyBytes = Annotated[
    int | None, Opt(help="Larger request bodies get 413 (default: the config's limits, else 1048576).")
]
MaxMessages = Annotated[
    int | None, Opt(help="More messages in one request get 422 (default: the config's limits, else 64).")
]
MaxChars = Annotated[
    int | None, Opt(help="Longer messages get 422 (default: the config's max_message_chars, else 10000).")
]
InferenceThreads = Annotated[int, Opt(help="Concurrent route() calls without a verifier; 0: one per core.")]
OrtThreads = Annotated[int, Opt(help="onnxruntime intra-op threads per call (0: all cores).")]
ServeVerifierTimeout = Annotated[float | None, Opt(help="Seconds per verifier HTTP request.")]
GracefulTimeout = Annotated[float, Opt(help="Seconds to finish requests in flight on shutdown.")]
KeepAliveTimeout = Annotated[
    float,
    Opt(help="Seconds an idle keep-alive connection stays open; keep it above your clients' and proxies'."),
]
Workers = Annotated[
    int, Opt(help="Server processes, each with its own model; N > 1: N processes on one port.")
]
MaxConnectionAge = Annotated[
    float | None,
    Opt(
        help="Seconds a keep-alive connection lives before a response closes it, so a worker started later "
        "gets its share (default: 30 with --workers N > 1, else off; 0: off)."
    ),
]
DecisionLog = Annotated[
    Path | None, Opt(help="Record every routed message and its decision in this directory.")
]
DecisionLogFormat = Annotated[str, Opt(help="Decision log files: jsonl or parquet (extra 'scale').")]
DecisionLogRedact = Annotated[
    str | None, Opt(help="module:function applied to every message before it is logged.")
]
Golden = Annotated[
    Path | None,
    Opt(
        help="Labelled JSONL every load and reload must route right (default: the packaged set, for a model "
        "of the shipped intents)."
    ),
]
GoldenMinAccuracy = Annotated[float, Opt(help="Share of the golden set a model must route right.")]
GoldenMinAgreement = Annotated[
    float, Opt(help="At a reload, share of the golden set routed as the serving model routes it.")
]
ReloadCompare = Annotated[
    Path | None,
    Opt(
        help="compare.json a reload that changes the model must pass: `intent-router compare` of the serving "
        "model (incumbent) against the new one (candidate), read again at each reload; an admin reload's "
        "'compare_report' names another."
    ),
]
Tools = Annotated[
    Path | None,
    Opt(help="Tool registry YAML: each decision gets the few tools it needs; read again at every reload."),
]
Ray = Annotated[
    bool, Opt("--ray", help="Serve as replicas on Ray Serve (extra 'ray-serve') instead of worker processes.")
]
Replicas = Annotated[int, Opt(min=1, help="With --ray: replicas (the minimum, with --max-replicas).")]
MaxReplicas = Annotated[
    int | None, Opt(min=1, help="With --ray: scale up to this many replicas as requests queue.")
]
RayAddress = Annotated[
    str | None, Opt(help="With --ray: the cluster to join ('auto': the local node's); default: start one.")
]
Otel = Annotated[
    bool,
    Opt(
        "--otel",
        help="Export OpenTelemetry traces over OTLP/HTTP (extra 'otel'): a span per request and per routed "
        "message, with its stages; the endpoint comes from OTEL_EXPORTER_OTLP_ENDPOINT.",
    ),
]
LoadDelay = Annotated[float, Opt(hidden=True, help="Wait before loading the model (tests).")]
LogLevel = Annotated[str, Opt()]
