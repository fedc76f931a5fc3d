"""Where and how to call the LLM verifier: settings from arguments and the environment, URL handling,
the API key policy and redaction of credentials wherever a URL is printed, logged or traced."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from router import env as envvars

ENV_URL = envvars.VERIFIER_URL
ENV_MODEL = envvars.VERIFIER_MODEL
ENV_API_KEY = envvars.VERIFIER_API_KEY
ENV_API_KEY_ENV = envvars.VERIFIER_API_KEY_ENV
ENV_API_KEY_FALLBACK = envvars.OPENAI_API_KEY  # only for an OpenAI host, or when named explicitly
ENV_TIMEOUT = envvars.VERIFIER_TIMEOUT
ENV_DEADLINE = envvars.VERIFIER_DEADLINE
ENV_ALLOW_INSECURE_KEY = envvars.VERIFIER_ALLOW_INSECURE_KEY

OPENAI_HOSTS = ("api.openai.com",)
AZURE_SUFFIXES = (".openai.azure.com", ".cognitiveservices.azure.com")
SAFE_QUERY_KEYS = ("api-version", "api_version")  # query values shown as they are; all others redacted
REDACTED = "[redacted]"


def is_loopback(host: str | None) -> bool:
    h = (host or "").lower().strip("[]")
    return h in ("localhost", "::1") or h.startswith("127.") or h.endswith(".localhost")


def redact_url(url: str) -> str:
    """``url`` with user info and every query value (except api-version) replaced by [redacted]."""
    try:
        parts = urlsplit(str(url).strip())
        host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return REDACTED
    netloc = host if ":" not in host else f"[{host}]"
    if port is not None:
        netloc += f":{port}"
    if parts.username is not None or parts.password is not None:
        netloc = f"{REDACTED}@{netloc}"
    query = urlencode(
        [(k, v if k.lower() in SAFE_QUERY_KEYS else REDACTED) for k, v in parse_qsl(parts.query, True)],
        safe="[]",
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def url_secrets(url: str) -> tuple[str, ...]:
    """The credentials inside ``url`` (password, user name, query values), to redact from any text."""
    try:
        parts = urlsplit(str(url).strip())
    except ValueError:
        return ()
    out = [parts.password or "", parts.username or ""]
    out += [v for k, v in parse_qsl(parts.query, True) if k.lower() not in SAFE_QUERY_KEYS]
    # longest first, so a secret that contains another is redacted whole; 3+ chars to keep text readable
    return tuple(sorted({s for s in out if len(s) >= 3}, key=len, reverse=True))


def chat_completions_url(base_url: str) -> str:
    """``{base_url}/chat/completions``, keeping a query string (Azure's ``?api-version=...``)."""
    parts = urlsplit(base_url.strip())
    path = parts.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path += "/chat/completions"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def _seconds(name: str, v: Any, allow_zero: bool = False) -> float:
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise ValueError(f"verifier {name} must be a number of seconds, got {v!r}") from None
    ok = math.isfinite(x) and (x >= 0 if allow_zero else x > 0) and x <= envvars.MAX_SECONDS
    if not ok:
        low = ">= 0" if allow_zero else "> 0"
        raise ValueError(
            f"verifier {name} must be finite, {low} and <= {envvars.MAX_SECONDS:g} seconds, got {v!r}"
        )
    return x


@dataclass(frozen=True, repr=False)
class VerifierSettings:
    """Where and how to call the LLM. ``deadline`` None means ``2 * timeout`` (4.0 s with the default).

    The API key is sent only to https endpoints or loopback addresses unless ``allow_insecure_key``.
    ``repr`` shows the URL redacted and never the key.
    """

    base_url: str
    model: str | None = None  # omitted from the request when None (llama.cpp server ignores it)
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 2.0  # seconds per HTTP request
    deadline: float | None = None  # seconds for the whole verification, all attempts included
    max_tokens: int = 64
    breaker_failures: int = 3  # consecutive failed verifications that open the breaker
    breaker_cooldown: float = 30.0  # seconds the breaker stays open before one trial call
    registry_path: str | Path | None = None  # router config YAML with the skill registry (default: shipped)
    api_key_header: str | None = None  # "authorization" (Bearer) or "api-key" (Azure); None: by host
    max_message_chars: int = 4000  # the message is cut to this many characters in the prompt
    allow_insecure_key: bool = False  # send the key over plain http to a non-loopback host

    def __post_init__(self) -> None:
        if not isinstance(self.base_url, str) or not self.base_url.strip():
            raise ValueError(f"verifier base_url is required (set {ENV_URL})")
        try:
            parts = urlsplit(self.base_url.strip())
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError:
            raise ValueError(f"verifier base_url is not a valid URL: {redact_url(self.base_url)}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"verifier base_url must be an http(s) URL, got {redact_url(self.base_url)!r}")
        object.__setattr__(self, "base_url", self.base_url.strip())
        if self.model is not None and not str(self.model).strip():
            object.__setattr__(self, "model", None)
        if self.api_key is not None and not str(self.api_key).strip():
            object.__setattr__(self, "api_key", None)
        object.__setattr__(self, "timeout", _seconds("timeout", self.timeout))
        object.__setattr__(
            self, "breaker_cooldown", _seconds("breaker_cooldown", self.breaker_cooldown, True)
        )
        deadline = 2 * self.timeout if self.deadline is None else _seconds("deadline", self.deadline)
        object.__setattr__(self, "deadline", deadline)
        for name in ("max_tokens", "breaker_failures", "max_message_chars"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or int(v) != v or int(v) < 1:
                raise ValueError(f"verifier {name} must be a positive integer, got {v!r}")
            object.__setattr__(self, name, int(v))
        if self.api_key_header is not None and self.api_key_header.lower() not in (
            "authorization",
            "api-key",
        ):
            raise ValueError(
                f"api_key_header must be 'authorization' or 'api-key', got {self.api_key_header!r}"
            )
        if not isinstance(self.allow_insecure_key, bool):
            raise ValueError(f"allow_insecure_key must be a bool, got {self.allow_insecure_key!r}")
        has_credentials = self.api_key is not None or parts.password is not None
        insecure = parts.scheme == "http" and not is_loopback(parts.hostname)
        if has_credentials and insecure and not self.allow_insecure_key:
            raise ValueError(
                f"refusing to send the verifier API key in clear text to {redact_url(self.base_url)}: "
                f"use https or a loopback address, or opt in with allow_insecure_key=True "
                f"({ENV_ALLOW_INSECURE_KEY}=1)"
            )

    def __repr__(self) -> str:
        shown = []
        for f in fields(self):
            if f.name == "api_key":
                shown.append(f"api_key={REDACTED!r}" if self.api_key else "api_key=None")
            elif f.name == "base_url":
                shown.append(f"base_url={redact_url(self.base_url)!r}")
            else:
                shown.append(f"{f.name}={getattr(self, f.name)!r}")
        return f"VerifierSettings({', '.join(shown)})"

    @property
    def host(self) -> str:
        return (urlsplit(self.base_url).hostname or "").lower()

    @property
    def endpoint(self) -> str:
        """The URL requests go to (with any credentials it carries: never print it, use ``endpoint_display``)."""
        return chat_completions_url(self.base_url)

    @property
    def endpoint_display(self) -> str:
        return redact_url(self.endpoint)

    @property
    def secrets(self) -> tuple[str, ...]:
        """Every credential these settings hold, to redact from traces, errors and logs."""
        out = [self.api_key] if self.api_key else []
        return tuple(out) + url_secrets(self.base_url)

    @classmethod
    def from_env(cls, *, environ: Mapping[str, str] | None = None, **overrides: Any) -> VerifierSettings:
        """Settings from the environment; keyword overrides win unless they are None.

        The key is ``INTENT_ROUTER_VERIFIER_API_KEY``, else the variable named by
        ``INTENT_ROUTER_VERIFIER_API_KEY_ENV`` (e.g. ``OPENAI_API_KEY``), else ``OPENAI_API_KEY`` only when
        the URL is an OpenAI host.
        """
        names = {f.name for f in fields(cls)}
        unknown = set(overrides) - names
        if unknown:
            raise TypeError(f"unknown verifier setting(s): {', '.join(sorted(unknown))}")
        values: dict[str, Any] = {}
        url = envvars.get_str(ENV_URL, environ)
        if url:
            values["base_url"] = url
        model = envvars.get_str(ENV_MODEL, environ)
        if model:
            values["model"] = model
        for var, name in ((ENV_TIMEOUT, "timeout"), (ENV_DEADLINE, "deadline")):
            x = envvars.get_seconds(var, env=environ)
            if x is not None:
                values[name] = x
        insecure = envvars.get_bool(ENV_ALLOW_INSECURE_KEY, environ)
        if insecure is not None:
            values["allow_insecure_key"] = insecure
        values.update({k: v for k, v in overrides.items() if v is not None})
        if "base_url" not in values:
            raise ValueError(f"no verifier URL: set {ENV_URL} or pass base_url")
        if "api_key" not in values:
            key = envvars.get_str(ENV_API_KEY, environ)
            named = envvars.get_str(ENV_API_KEY_ENV, environ)
            if key is None and named is not None:
                key = envvars.get_str(named, environ)
                if key is None:
                    raise envvars.EnvError(f"{ENV_API_KEY_ENV} names {named}, which is not set")
            if key is None:
                host = (urlsplit(str(values["base_url"]).strip()).hostname or "").lower()
                if host in OPENAI_HOSTS:
                    key = envvars.get_str(ENV_API_KEY_FALLBACK, environ)
            if key is not None:
                values["api_key"] = key
        return cls(**values)
