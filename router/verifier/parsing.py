"""Defensive parsing of the model output, and trace-safe text."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

from router.intents import OUT_OF_SCOPE, answers_of
from router.verifier.base import (
    ACCEPTED,
    INVALID_INTENT,
    INVALID_JSON,
    VERIFIER_REASON_CODES,
)

RAW_LIMIT = 500  # characters of raw output kept per attempt in the trace
_THINK = re.compile(r"<think>.*?(</think>|$)", re.S | re.I)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON)?[ \t]*\n?(.*?)```", re.S)
_PARSE_LIMIT = 8_000


def extract_json_object(text: str) -> dict | None:
    """The first JSON object in ``text`` (prefers one with an "intent" key), tolerating code fences,
    <think> blocks and prose around it."""
    text = _THINK.sub("", text or "")[:_PARSE_LIMIT]
    decoder = json.JSONDecoder()
    first: dict | None = None
    for candidate in [m.group(1) for m in _FENCE.finditer(text)] + [text]:
        for m in re.finditer(r"\{", candidate):
            try:
                obj, _ = decoder.raw_decode(candidate, m.start())
            except (ValueError, RecursionError):
                continue
            if isinstance(obj, dict):
                if "intent" in obj:
                    return obj
                if first is None:
                    first = obj
    return first


class Verdict(NamedTuple):
    """One model output, validated. ``secondary`` is a second intent (one of the model's intents, never ``intent``);
    ``dropped`` says why a ``secondary_intent`` the model gave was not kept (for the attempt's trace)."""

    status: str
    intent: str | None
    reason_code: str | None
    error: str | None
    secondary: str | None = None
    dropped: str | None = None


_NO_SECONDARY = ("", "NONE", "NULL")


def _by_name(names: Sequence[str]) -> dict[str, str]:
    """Case-folded name -> name: a model answering "search" or " Search " means SEARCH."""
    return {n.casefold(): n for n in names}


def parse_secondary(value: Any, intent: str, intents: Sequence[str]) -> tuple[str | None, str | None]:
    """(secondary, why dropped) for a ``secondary_intent`` value next to the valid ``intent``: missing,
    null, "", "none" or ``intent`` itself mean no second intent; anything else outside ``intents``, or any
    second intent of an OUT_OF_SCOPE answer, is dropped (never a failure)."""
    if value is None:
        return None, None
    norm = _by_name(intents).get(value.strip().casefold()) if isinstance(value, str) else None
    if norm == intent or (isinstance(value, str) and value.strip().upper() in _NO_SECONDARY):
        return None, None
    shown = str(value)[:40]
    if norm is None:
        return None, f"secondary_intent {shown!r} dropped: not one of {', '.join(intents)}"
    if intent == OUT_OF_SCOPE:
        return None, f"secondary_intent {shown!r} dropped: the intent is {OUT_OF_SCOPE}"
    return norm, None


def validate_output(content: str, intents: Sequence[str]) -> Verdict:
    """Validate one model output: intent (one of ``intents`` or out of scope) and reason_code must be
    valid; secondary_intent is optional."""
    obj = extract_json_object(content)
    if obj is None:
        return Verdict(INVALID_JSON, None, None, "no JSON object in the output")
    if "intent" not in obj:
        return Verdict(INVALID_JSON, None, None, "the JSON object has no 'intent'")
    intent = obj["intent"]
    answers = answers_of(intents)
    norm = _by_name(answers).get(intent.strip().casefold()) if isinstance(intent, str) else None
    if norm is None:
        return Verdict(
            INVALID_INTENT, None, None, f"intent {str(intent)[:40]!r} is not one of {', '.join(answers)}"
        )
    code = obj.get("reason_code")
    code_norm = code.strip().lower().replace("-", "_").replace(" ", "_") if isinstance(code, str) else None
    if code_norm not in VERIFIER_REASON_CODES:
        return Verdict(
            INVALID_JSON,
            norm,
            None,
            f"reason_code {str(code)[:40]!r} is not one of {', '.join(VERIFIER_REASON_CODES)}",
        )
    secondary, dropped = parse_secondary(obj.get("secondary_intent"), norm, intents)
    return Verdict(ACCEPTED, norm, code_norm, None, secondary, dropped)


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def sanitize(text: Any, secrets: tuple[str | None, ...] = (), limit: int = RAW_LIMIT) -> str:
    """Trace-safe text: secrets redacted, control and bidi characters removed, cut to ``limit`` chars."""
    if text is None:
        return ""
    s = text if isinstance(text, str) else str(text)
    for secret in secrets:
        if secret:
            s = s.replace(secret, "[redacted]")
    s = _CONTROL.sub("", s)
    if len(s) > limit:
        s = s[:limit] + f"...[{len(s) - limit} more chars]"
    return s


def rejects_response_format(status: int, body: str) -> bool:
    if status not in (400, 422, 500):
        return False
    low = body.lower()
    return any(k in low for k in ("response_format", "json_schema", "json_object"))
