"""Compatibility shim: the LLM verifier now lives in the ``router.verifier`` package
(settings, breaker, prompt, parsing, transport, client). Kept because cli.py imports from here."""

from router.verifier.breaker import CircuitBreaker
from router.verifier.client import LLMVerifier
from router.verifier.parsing import extract_json_object, sanitize, validate_output
from router.verifier.prompt import build_system_prompt, build_user_prompt, output_schema
from router.verifier.settings import VerifierSettings, chat_completions_url, redact_url

__all__ = [
    "CircuitBreaker",
    "LLMVerifier",
    "VerifierSettings",
    "build_system_prompt",
    "build_user_prompt",
    "chat_completions_url",
    "extract_json_object",
    "output_schema",
    "redact_url",
    "sanitize",
    "validate_output",
]
