"""Verifiers: asked for an intent when the classifier is not confident enough.

- ``router.verifier.base``: the Verifier protocol, VerifierResult, VerifierError (no third-party imports);
- ``router.verifier.settings``: VerifierSettings (environment, URL, API key policy, redaction);
- ``router.verifier.breaker``: the circuit breaker;
- ``router.verifier.prompt``: the static system prompt and the per-message user prompt;
- ``router.verifier.parsing``: defensive parsing and validation of the model output, trace sanitising;
- ``router.verifier.transport``: an httpx transport whose sockets honour a wall-clock deadline;
- ``router.verifier.openai_compatible``: LLMVerifier over an OpenAI-compatible chat completions endpoint;
- ``router.verifier.factory``: ``build_verifier``, the one place the CLI and the service build a backend.

``import router.verifier`` stays cheap: the LLM verifier (and httpx) load on first use of its names.
"""

from __future__ import annotations

from router.verifier.base import (
    ACCEPTED,
    CIRCUIT_OPEN,
    EMPTY_RESPONSE,
    HTTP_ERROR,
    INVALID_INTENT,
    INVALID_JSON,
    TIMEOUT,
    VERIFIER_REASON_CODES,
    Verifier,
    VerifierError,
    VerifierResult,
    VerifierUnavailable,
)

_LAZY = {
    "LLMVerifier": "router.verifier.openai_compatible",
    "build_verifier": "router.verifier.factory",
    "VerifierSettings": "router.verifier.settings",
    "chat_completions_url": "router.verifier.settings",
    "redact_url": "router.verifier.settings",
    "CircuitBreaker": "router.verifier.breaker",
    "extract_json_object": "router.verifier.parsing",
    "validate_output": "router.verifier.parsing",
    "sanitize": "router.verifier.parsing",
}

__all__ = [
    "ACCEPTED",
    "CIRCUIT_OPEN",
    "EMPTY_RESPONSE",
    "HTTP_ERROR",
    "INVALID_INTENT",
    "INVALID_JSON",
    "TIMEOUT",
    "VERIFIER_REASON_CODES",
    "Verifier",
    "VerifierError",
    "VerifierResult",
    "VerifierUnavailable",
    *_LAZY,
]


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'router.verifier' has no attribute {name!r}")
