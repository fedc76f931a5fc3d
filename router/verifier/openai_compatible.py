"""LLMVerifier over an OpenAI-compatible ``POST {base_url}/chat/completions`` (Ollama, vLLM, llama.cpp
server, LM Studio, OpenAI, Azure OpenAI).

Asked only when the classifier's calibrated confidence is below the threshold, it chooses one of the
model's intents; skills and RBAC are applied by the router afterwards, so a message cannot grant itself
anything. ``response_format`` is sent as ``json_schema``; an endpoint that rejects it is retried as
``json_object`` + schema, then as plain JSON instructions, and the dialect it accepted is remembered.
One strict retry follows an invalid output. Every attempt (status, sanitised raw output) goes into the
decision trace. The whole verification has a wall-clock deadline that holds whatever the server does
(see ``router.verifier.transport``), and a circuit breaker stops calling an endpoint that keeps failing.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from router.verifier import transport
from router.verifier.base import (
    ACCEPTED,
    CIRCUIT_OPEN,
    HTTP_ERROR,
    TIMEOUT,
    VerifierError,
    VerifierResult,
    VerifierUnavailable,
)
from router.verifier.breaker import CircuitBreaker
from router.verifier.completion import new_attempt, read_completion, request_body, verdict_of
from router.verifier.parsing import RAW_LIMIT, Verdict, rejects_response_format, sanitize
from router.verifier.prompt import (
    build_system_prompt,
    build_user_prompt,
    definitions_for,
    intents_defined,
    load_intent_definitions,
    output_schema,
    strict_retry_suffix,
)
from router.verifier.settings import AZURE_SUFFIXES, VerifierSettings, is_loopback, redact_url

if TYPE_CHECKING:
    from router.classifier import Classification
    from router.config import RouterConfig
    from router.decision import Decision

log = logging.getLogger("router.verifier")

DIALECTS = ("json_schema", "json_object", "plain")  # tried in this order; the endpoint's choice is remembered
MAX_BODY_BYTES = 1_000_000  # a response body larger than this is cut (and will not parse)
MIN_ATTEMPT_SECONDS = 0.02  # do not start a request with less time than this left before the deadline
MAX_RETRY_TOKENS = 1024  # cap for the raised max_tokens after a finish_reason "length"
PHASES = {
    "dns": "name resolution",
    "connect": "the TCP connection",
    "tls": "the TLS handshake",
    "send": "sending the request",
    "headers": "the response headers",
    "body": "the response body",
}

_URL = re.compile(r"https?://[^\s\"'<>]+")


class _RedactURLs(logging.Filter):
    """Redacts credentials in any URL of a log record (httpx logs every request URL at INFO)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            msg = record.getMessage()
        except Exception:
            return True
        redacted = _URL.sub(lambda m: redact_url(m.group(0)), msg)
        if redacted != msg:
            record.msg, record.args = redacted, ()
        return True


_FILTER = _RedactURLs()


def install_log_redaction() -> None:
    """Idempotent: add the URL-redacting filter to httpx's and httpcore's loggers."""
    for name in ("httpx", "httpcore"):
        lg = logging.getLogger(name)
        if _FILTER not in lg.filters:
            lg.addFilter(_FILTER)


class _Failure(Exception):
    def __init__(self, status: str, message: str, endpoint_failed: bool) -> None:
        super().__init__(message)
        self.status, self.endpoint_failed = status, endpoint_failed


class _DeadlineReached(Exception):
    pass


class LLMVerifier:
    """Verifier over an OpenAI-compatible chat completions endpoint. Thread-safe: one httpx.Client shared
    by all calls, breaker and dialect state under locks."""

    def __init__(
        self,
        settings: VerifierSettings,
        registry: RouterConfig | str | Path | None = None,
        *,
        intents_path: str | Path | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from router.config import RouterConfig

        self.settings = settings
        if not isinstance(registry, RouterConfig):
            registry = RouterConfig.load(registry if registry is not None else settings.registry_path)
        self.registry = registry
        # each config intent's description, else its entry in the intents file (the shipped model's)
        definitions = definitions_for(registry, load_intent_definitions(intents_path))
        self.intents = intents_defined(definitions)  # what it chooses among: the model's (Router checks)
        self.output_schema = output_schema(self.intents)
        self.system_prompt = build_system_prompt(registry, definitions)
        self.endpoint = settings.endpoint_display  # for messages and logs; credentials redacted
        self._url = settings.endpoint
        self._secrets = settings.secrets
        self.breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_cooldown, clock=clock)
        self._clock = clock
        self._dialect_lock = threading.Lock()
        self._dialect_index = 0  # into DIALECTS: what this endpoint accepts, learnt from its rejections
        headers = {"Accept": "application/json", "User-Agent": "intent-router-verifier"}
        host = settings.host
        if settings.api_key:
            style = (
                settings.api_key_header or ("api-key" if host.endswith(AZURE_SUFFIXES) else "authorization")
            ).lower()
            if style == "api-key":
                headers["api-key"] = settings.api_key
            else:
                headers["Authorization"] = f"Bearer {settings.api_key}"
        install_log_redaction()
        limits = httpx.Limits(max_connections=64, max_keepalive_connections=16)
        # a local LLM must not be sent through an HTTP(S)_PROXY from the environment
        self._client = httpx.Client(
            headers=headers,
            trust_env=not is_loopback(host),
            follow_redirects=False,
            transport=transport.deadline_transport(limits),
        )

    # --------------------------------------------------------------------------------- public
    @property
    def dialect(self) -> str:
        """The response_format dialect the next request uses (what the endpoint last accepted)."""
        with self._dialect_lock:
            return DIALECTS[self._dialect_index]

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> LLMVerifier:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def verify(
        self,
        text: str,
        classification: Classification,
        previous: Decision | None = None,
        context: str | None = None,
    ) -> VerifierResult:
        start = self._clock()
        token = self.breaker.acquire()
        if token is None:
            wait = self.breaker.retry_in()
            why = (
                f"circuit breaker open after {self.breaker.failures} consecutive failure(s); next trial in {wait:.1f} s"
                if wait > 0
                else "circuit breaker half-open: a trial call is in flight"
            )
            raise VerifierUnavailable(
                f"{why} ({self.endpoint})", status=CIRCUIT_OPEN, breaker=self.breaker.state
            )
        was_probe = token == CircuitBreaker.HALF_OPEN
        attempts: list[dict[str, Any]] = []
        try:
            turn = (previous, context)
            verdict = self._run(text, classification, turn, start + self.settings.deadline, attempts)
        except _Failure as f:
            self._record(f.endpoint_failed, was_probe)
            raise VerifierError(
                str(f), status=f.status, attempts=attempts, breaker=self.breaker.state
            ) from None
        except BaseException:  # a bug or an interrupt: count it, release a trial call, re-raise
            self._record(True, was_probe)
            raise
        self._record(False, was_probe)
        return VerifierResult(
            intent=verdict.intent,
            reason_code=verdict.reason_code,
            attempts=attempts,
            breaker=self.breaker.state,
            secondary=verdict.secondary,
        )

    # ------------------------------------------------------------------------------- internals
    def _record(self, failed: bool, was_probe: bool) -> None:
        if failed:
            self.breaker.record_failure(was_probe)
        else:
            self.breaker.record_success()

    def _run(self, text, classification, turn, deadline_at, attempts) -> Verdict:
        """Attempts until a verdict the router can use: a rejected response format is retried in the next
        dialect, an invalid output once with a stricter prompt (and more tokens when it was cut off)."""
        s = self.settings
        previous, context = turn
        user = build_user_prompt(text, classification, previous, s.max_message_chars, context=context)
        strict_error: str | None = None
        max_tokens = s.max_tokens
        dialect_switches = 0
        while True:
            remaining = deadline_at - self._clock()
            if remaining < MIN_ATTEMPT_SECONDS:
                raise _Failure(
                    TIMEOUT,
                    f"verifier deadline of {s.deadline:g} s reached after {len(attempts)} attempt(s)",
                    endpoint_failed=True,
                )
            dialect = self.dialect
            content = user + (strict_retry_suffix(strict_error, self.output_schema) if strict_error else "")
            body = request_body(self.system_prompt, content, s.model, dialect, max_tokens, self.output_schema)
            att = new_attempt(len(attempts) + 1, dialect, strict_error is not None, max_tokens)
            attempts.append(att)
            t0 = self._clock()
            status, raw_body = self._exchange(body, min(s.timeout, remaining), deadline_at, att, t0)
            att["http_status"] = status
            if status >= 400:
                if self._switch_dialect(att, t0, status, raw_body, dialect_switches):
                    dialect_switches += 1
                    continue
                self._finish(att, t0, HTTP_ERROR, raw=raw_body, error=f"HTTP {status}")
                raise _Failure(HTTP_ERROR, f"verifier endpoint answered HTTP {status}", endpoint_failed=True)
            try:
                out, finish = read_completion(raw_body)
            except ValueError as e:
                self._finish(att, t0, HTTP_ERROR, raw=raw_body, error=str(e))
                raise _Failure(
                    HTTP_ERROR,
                    "verifier endpoint answered something other than a chat completion",
                    endpoint_failed=True,
                ) from None
            att["finish_reason"] = finish
            verdict = verdict_of(out, finish, self.intents)
            err = verdict.error
            self._finish(att, t0, verdict.status, raw=out, error=err)
            if verdict.dropped:
                att["secondary_dropped"] = self._safe(verdict.dropped, 300)
            if verdict.status == ACCEPTED:
                return verdict
            if strict_error is not None:
                raise _Failure(
                    verdict.status, f"verifier output invalid twice ({err})", endpoint_failed=False
                )
            strict_error = err
            if finish == "length":
                max_tokens = min(max(max_tokens * 2, max_tokens + 32), MAX_RETRY_TOKENS)

    def _exchange(self, body: dict, request_timeout: float, deadline_at: float, att: dict, t0: float):
        """(HTTP status, body) of one POST; a timeout or transport error fails the call, naming its phase."""
        s = self.settings
        # the wall-clock bound of this exchange: the deadline, in time.monotonic() terms
        ex_deadline = time.monotonic() + (deadline_at - self._clock())
        with transport.exchange(ex_deadline) as ex:
            try:
                return self._post(body, request_timeout, deadline_at, ex)
            except (httpx.TimeoutException, _DeadlineReached) as e:
                elapsed = self._clock() - t0
                phase = PHASES.get(ex.phase, ex.phase)
                att["phase"] = ex.phase
                if ex.deadline_hit or isinstance(e, _DeadlineReached):
                    why = f"the verifier deadline of {s.deadline:g} s ran out during {phase}"
                else:
                    why = f"the request timeout of {request_timeout:.2f} s ran out during {phase}"
                self._finish(att, t0, TIMEOUT, error=f"{why} ({type(e).__name__})")
                raise _Failure(
                    TIMEOUT, f"verifier timed out after {elapsed:.2f} s: {why}", endpoint_failed=True
                ) from None
            except httpx.HTTPError as e:
                att["phase"] = ex.phase
                self._finish(att, t0, HTTP_ERROR, error=f"{type(e).__name__}: {e}")
                raise _Failure(
                    HTTP_ERROR,
                    f"verifier request failed: {type(e).__name__}: {self._safe(e)}",
                    endpoint_failed=True,
                ) from None

    def _switch_dialect(self, att: dict, t0: float, status: int, raw_body: str, switches: int) -> bool:
        """Whether an error answer rejected the response format, so the next dialect is worth a try."""
        dialect = att["dialect"]
        if (
            dialect == "plain"
            or not rejects_response_format(status, raw_body)
            or switches >= len(DIALECTS) - 1
        ):
            return False
        nxt = self._reject_dialect(dialect)
        error = f"endpoint rejected response_format {dialect}; retrying as {nxt}"
        self._finish(att, t0, HTTP_ERROR, raw=raw_body, error=error)
        att["dialect_rejected"] = True
        return True

    def _post(
        self, body: dict, timeout: float, deadline_at: float, ex: transport.Exchange
    ) -> tuple[int, str]:
        chunks, size = [], 0
        with self._client.stream("POST", self._url, json=body, timeout=httpx.Timeout(timeout)) as r:
            ex.got_headers()
            for chunk in r.iter_bytes():
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    break
                if self._clock() > deadline_at:
                    raise _DeadlineReached("deadline reached while reading the response")
            return r.status_code, b"".join(chunks)[:MAX_BODY_BYTES].decode("utf-8", errors="replace")

    def _finish(self, att: dict, t0: float, status: str, raw: str = "", error: str | None = None) -> None:
        att["status"] = status
        att["ms"] = round((self._clock() - t0) * 1000, 3)
        att["raw"] = self._safe(raw)
        if error:
            att["error"] = self._safe(error, 300)

    def _safe(self, text: Any, limit: int = RAW_LIMIT) -> str:
        if text is not None and not isinstance(text, str):
            text = str(text)
        if text:
            text = _URL.sub(lambda m: redact_url(m.group(0)), text)
        return sanitize(text, self._secrets, limit)

    def _reject_dialect(self, dialect: str) -> str:
        with self._dialect_lock:
            i = DIALECTS.index(dialect)
            if self._dialect_index == i and i < len(DIALECTS) - 1:
                self._dialect_index = i + 1
                log.info(
                    "verifier endpoint %s rejected response_format %s; using %s from now on",
                    self.endpoint,
                    dialect,
                    DIALECTS[i + 1],
                )
            return DIALECTS[self._dialect_index]
