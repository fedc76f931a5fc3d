"""Server settings: where to listen, which model, limits, auth, worker processes and the decision log."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_NAMES = ("localhost",)
# the request limits without a flag or a router config's limits section
LIMITS = {"max_body_bytes": 1_048_576, "max_messages": 64, "max_chars": 10_000}
CONFIG_LIMITS = {
    "max_body_bytes": "max_body_bytes",
    "max_messages": "max_messages",
    "max_chars": "max_message_chars",
}


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServeSettings:
    host: str = "127.0.0.1"
    port: int = 8080
    model_dir: str | Path | None = None  # default: $INTENT_ROUTER_MODEL or the shipped model
    config: str | Path | None = None  # router config YAML (skills, roles, threshold)
    threshold: float | None = None
    tools: str | Path | None = None  # a tool registry YAML (router.tools): read again at every reload
    key_file: str | Path | None = None  # API key hashes -> roles; None: loopback only, any role
    # limits; None: the router config's (its limits section, which reloads with it), else LIMITS
    max_body_bytes: int | None = None  # 413 above this
    max_messages: int | None = None  # per request; 422 above this
    max_chars: int | None = None  # per message; 422 above this
    # execution
    inference_threads: int = 0  # concurrent route() calls without a verifier; 0: one per core
    verifier_threads: int = 32  # concurrent route() calls with a verifier (they wait on HTTP)
    ort_threads: int | None = 1  # onnxruntime intra-op threads per call (None: $INTENT_ROUTER_THREADS or all)
    verifier_url: str | None = None
    verifier_model: str | None = None
    verifier_timeout: float | None = None
    graceful_timeout: float = 30.0  # seconds to finish requests in flight on SIGTERM
    keep_alive_timeout: float = 75.0  # seconds an idle keep-alive connection stays open
    workers: int = 1  # server processes, each with its own Router (router.serve.workers)
    # seconds a keep-alive connection lives before a response closes it (router.serve.connections), so a
    # worker started later gets its share; None: 30 with several workers, off with one; 0: off
    max_connection_age: float | None = None
    # decision log (router.decision_log): one DecisionLog per worker process
    decision_log: str | Path | None = None
    decision_log_format: str = "jsonl"
    decision_log_redact: str | None = None  # "module:function" applied to every logged message
    log_level: str = "info"
    access_log: bool = False
    # OpenTelemetry traces over OTLP/HTTP (extra 'otel'; router.tracing): endpoint from OTEL_EXPORTER_OTLP_*
    otel: bool = False
    # the golden set every load and reload must pass (router.serve.golden); None: the packaged one
    golden: str | Path | None = None
    golden_min_accuracy: float = 0.9
    golden_min_agreement: float = 0.8
    # a compare report every reload that changes the model must pass (router.serve.promotion); None: no
    # report needed, unless an admin reload names one
    reload_compare: str | Path | None = None
    load_delay: float = 0.0  # seconds to wait before loading the model (tests, staged rollouts)
    # set by the supervisor of several workers: the directory they share (reload target, metrics), and
    # for a worker that replaces one that exited, to load the model before accepting connections
    run_dir: str | Path | None = None
    load_before_serving: bool = False

    def __post_init__(self) -> None:
        for name in LIMITS:
            if getattr(self, name) is not None and int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.inference_threads == 0:
            self.inference_threads = min(8, os.cpu_count() or 1)
        if self.inference_threads < 1 or self.verifier_threads < 1:
            raise ValueError("inference_threads must be >= 0 and verifier_threads >= 1")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.max_connection_age is None:
            self.max_connection_age = 30.0 if self.workers > 1 else 0.0
        if self.max_connection_age < 0:
            raise ValueError(f"max_connection_age must be >= 0 seconds, got {self.max_connection_age}")
        if self.keep_alive_timeout <= 0:
            raise ValueError(f"keep_alive_timeout must be > 0 seconds, got {self.keep_alive_timeout}")
        if self.decision_log_format not in ("jsonl", "parquet"):
            raise ValueError(
                f"decision log format must be jsonl or parquet, got {self.decision_log_format!r}"
            )
        for name in ("golden_min_accuracy", "golden_min_agreement"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {getattr(self, name)}")
        if self.golden is not None:
            from router.serve.golden import load_golden

            load_golden(self.golden)  # a missing or malformed file is a configuration error
        if self.otel:
            try:
                import opentelemetry.instrumentation.fastapi
                import opentelemetry.sdk  # noqa: F401
            except ImportError as e:
                raise ValueError(
                    f"--otel needs the 'otel' extra: pip install 'intent-router[otel]' ({e})"
                ) from None
        if self.decision_log_redact is not None and self.decision_log is None:
            raise ValueError("a decision log redaction hook needs --decision-log DIR")
        if self.key_file is None and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host} without a key file: without credentials any caller "
                "could claim any role. Pass --key-file, or listen on 127.0.0.1."
            )


def limit(settings: ServeSettings, name: str, config=None) -> int:
    """A request limit: the flag's, else the router ``config``'s limits section's, else LIMITS'."""
    value = getattr(settings, name)
    if value is None and config is not None and config.limits is not None:
        value = getattr(config.limits, CONFIG_LIMITS[name])
    return int(value) if value is not None else LIMITS[name]
