"""Every environment variable the runtime reads, parsed in one place, with bounds.

An invalid value is an error that names the variable, the value and what is allowed, raised when the
value is first needed (Router/Classifier load, ``VerifierSettings.from_env``), never a hang or a bare
``int()`` message. Nothing else in router/ reads ``os.environ``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

MODEL = "INTENT_ROUTER_MODEL"
THREADS = "INTENT_ROUTER_THREADS"
VERIFIER_URL = "INTENT_ROUTER_VERIFIER_URL"
VERIFIER_MODEL = "INTENT_ROUTER_VERIFIER_MODEL"
VERIFIER_API_KEY = "INTENT_ROUTER_VERIFIER_API_KEY"
VERIFIER_API_KEY_ENV = "INTENT_ROUTER_VERIFIER_API_KEY_ENV"  # name of another variable holding the key
VERIFIER_TIMEOUT = "INTENT_ROUTER_VERIFIER_TIMEOUT"
VERIFIER_DEADLINE = "INTENT_ROUTER_VERIFIER_DEADLINE"
VERIFIER_ALLOW_INSECURE_KEY = "INTENT_ROUTER_VERIFIER_ALLOW_INSECURE_KEY"
OPENAI_API_KEY = "OPENAI_API_KEY"

MAX_THREADS = 64  # onnxruntime intra-op threads; more only costs memory and start-up time
MAX_SECONDS = 600.0  # verifier timeout and deadline


class EnvError(ValueError):
    """An environment variable has a value the runtime cannot use."""


def _raw(name: str, env: Mapping[str, str] | None) -> str | None:
    v = (os.environ if env is None else env).get(name)
    if v is None or not v.strip():
        return None
    return v.strip()


def get_str(name: str, env: Mapping[str, str] | None = None) -> str | None:
    """The variable's value, stripped; None when unset or blank."""
    return _raw(name, env)


def get_int(name: str, lo: int, hi: int, env: Mapping[str, str] | None = None) -> int | None:
    v = _raw(name, env)
    if v is None:
        return None
    try:
        n = int(v, 10)
    except ValueError:
        raise EnvError(f"{name} must be an integer from {lo} to {hi}, got {v!r}") from None
    if not lo <= n <= hi:
        raise EnvError(f"{name} must be an integer from {lo} to {hi}, got {n}")
    return n


def get_seconds(name: str, hi: float = MAX_SECONDS, env: Mapping[str, str] | None = None) -> float | None:
    """A positive, finite number of seconds, at most ``hi``."""
    v = _raw(name, env)
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        raise EnvError(f"{name} must be a number of seconds (0 < s <= {hi:g}), got {v!r}") from None
    if not math.isfinite(x) or not 0 < x <= hi:
        raise EnvError(f"{name} must be a number of seconds (0 < s <= {hi:g}), got {v!r}")
    return x


def get_bool(name: str, env: Mapping[str, str] | None = None) -> bool | None:
    v = _raw(name, env)
    if v is None:
        return None
    low = v.lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise EnvError(f"{name} must be one of 1/0, true/false, yes/no, on/off, got {v!r}")


def threads(env: Mapping[str, str] | None = None) -> int:
    """INTENT_ROUTER_THREADS: onnxruntime intra-op threads, 0 (default) lets onnxruntime choose."""
    n = get_int(THREADS, 0, MAX_THREADS, env)
    return 0 if n is None else n


def check_threads(n: int, source: str = "intra_op_threads") -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= MAX_THREADS:
        raise ValueError(f"{source} must be an integer from 0 to {MAX_THREADS}, got {n!r}")
    return n
