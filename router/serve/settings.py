"""Server settings: where to listen, which model, limits, auth and batching."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

LOOPBACK_NAMES = ("localhost",)


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
    key_file: str | Path | None = None  # API key hashes -> roles; None: loopback only, any role
    # limits
    max_body_bytes: int = 1_048_576  # 413 above this
    max_messages: int = 64  # per request; 422 above this
    max_chars: int = 10_000  # per message; 422 above this
    # execution
    inference_threads: int = 0  # concurrent route() calls without a verifier; 0: one per core
    verifier_threads: int = 32  # concurrent route() calls with a verifier (they wait on HTTP)
    ort_threads: int | None = 1  # onnxruntime intra-op threads per call (None: $INTENT_ROUTER_THREADS or all)
    verifier_url: str | None = None
    verifier_model: str | None = None
    verifier_timeout: float | None = None
    graceful_timeout: float = 30.0  # seconds to finish requests in flight on SIGTERM
    log_level: str = "info"
    access_log: bool = False
    load_delay: float = 0.0  # seconds to wait before loading the model (tests, staged rollouts)

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_messages", "max_chars"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.inference_threads == 0:
            self.inference_threads = min(8, os.cpu_count() or 1)
        if self.inference_threads < 1 or self.verifier_threads < 1:
            raise ValueError("inference_threads must be >= 0 and verifier_threads >= 1")
        if self.key_file is None and not is_loopback(self.host):
            raise ValueError(
                f"refusing to listen on {self.host} without a key file: without credentials any caller "
                "could claim any role. Pass --key-file, or listen on 127.0.0.1."
            )
