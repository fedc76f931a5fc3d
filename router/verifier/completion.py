"""One chat completion exchange with an OpenAI-compatible endpoint, as data: the request body for a
response-format dialect, the attempt record of the decision trace, and the verdict read from the answer.
router.verifier.openai_compatible sends them and decides what to try next."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from router.verifier.base import EMPTY_RESPONSE, INVALID_JSON
from router.verifier.parsing import Verdict, validate_output


def request_body(
    system_prompt: str, content: str, model: str | None, dialect: str, max_tokens: int, schema: dict
) -> dict[str, Any]:
    """The request for one attempt; ``dialect`` says how the output schema is asked for (json_schema,
    json_object, or plain: in the prompt only)."""
    body: dict[str, Any] = {
        "messages": [{"role": "system", "content": system_prompt}, {"role": "user", "content": content}],
        "temperature": 0,
        "max_tokens": max_tokens,
        "stream": False,
    }
    if model:
        body["model"] = model
    if dialect == "json_schema":
        body["response_format"] = {
            "type": "json_schema",
            "json_schema": {"name": "intent_verdict", "strict": True, "schema": schema},
        }
    elif dialect == "json_object":
        body["response_format"] = {"type": "json_object", "schema": schema}
    return body


def new_attempt(number: int, dialect: str, strict: bool, max_tokens: int) -> dict[str, Any]:
    """The trace's record of one attempt, filled in as it goes."""
    return {
        "attempt": number,
        "status": None,
        "dialect": dialect,
        "strict": strict,
        "max_tokens": max_tokens,
        "http_status": None,
        "finish_reason": None,
        "ms": 0.0,
        "raw": "",
    }


def read_completion(raw_body: str) -> tuple[str, str | None]:
    """(the message's text, its finish_reason); ValueError for an answer that is not a chat completion."""
    try:
        choice = json.loads(raw_body)["choices"][0]
        out = (choice.get("message") or {}).get("content")
        finish = choice.get("finish_reason")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError):
        raise ValueError("the response is not a chat completion") from None
    if isinstance(out, list):  # content parts
        out = "".join(p.get("text", "") for p in out if isinstance(p, dict))
    return (out if isinstance(out, str) else ("" if out is None else json.dumps(out))), finish


def verdict_of(out: str, finish: str | None, intents: Sequence[str]) -> Verdict:
    """What the text says: an intent the router can use, or why not."""
    if not out.strip():
        return Verdict(EMPTY_RESPONSE, None, None, "empty output")
    if finish == "length":
        return Verdict(INVALID_JSON, None, None, "output cut off at max_tokens (finish_reason length)")
    return validate_output(out, intents)
