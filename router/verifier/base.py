"""The Verifier interface: asked for an intent when the classifier is not confident enough.

A verifier only chooses an intent; skills and RBAC are applied by the router afterwards, so nothing
a message says can widen what the caller's role grants.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from router.intents import OUT_OF_SCOPE, RESERVED

if TYPE_CHECKING:
    from router.classifier import Classification
    from router.decision import Decision

VERIFIER_REASON_CODES = ("fresh_request", "same_domain_follow_up", "ambiguous", "other")

# statuses of a verification and of each attempt (in the decision trace)
ACCEPTED = "accepted"
EMPTY_RESPONSE = "empty_response"
INVALID_JSON = "invalid_json"
INVALID_INTENT = "invalid_intent"
HTTP_ERROR = "http_error"
TIMEOUT = "timeout"
CIRCUIT_OPEN = "circuit_open"  # VerifierUnavailable: not called at all


@dataclass
class VerifierResult:
    """The verifier's answer. ``secondary`` is the second intent of a compound request (primary =
    ``intent``, the end goal), never ``intent``; None when ``intent`` is OUT_OF_SCOPE. The router
    checks both against the model's intents (router.verifier.stage)."""

    intent: str
    reason_code: str = "other"
    attempts: list[dict[str, Any]] = field(default_factory=list)
    breaker: str | None = None
    secondary: str | None = None

    def __post_init__(self) -> None:
        if self.intent == OUT_OF_SCOPE or self.secondary == self.intent or self.secondary in RESERVED:
            self.secondary = None


class VerifierError(Exception):
    """The verifier could not give a valid intent. ``status`` names why; ``attempts`` go to the trace."""

    def __init__(
        self,
        message: str,
        status: str = "error",
        attempts: list[dict[str, Any]] | None = None,
        breaker: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.attempts = attempts or []
        self.breaker = breaker


class VerifierUnavailable(VerifierError):
    """Not called at all (for example an open circuit breaker)."""


@runtime_checkable
class Verifier(Protocol):
    """What the router asks of a verifier: every member it reads is here."""

    @property
    def intents(self) -> Sequence[str] | None:
        """The intents it chooses among (the router refuses a verifier whose intents are not its own), or
        None when it takes whatever intents it is asked about."""
        ...

    def verify(
        self,
        text: str,
        classification: Classification,
        previous: Decision | None = None,
        context: str | None = None,
    ) -> VerifierResult:
        """Return the intent for ``text`` or raise VerifierError. ``previous`` is the previous turn's
        Decision and ``context`` its message, or None when the caller gave none."""
        ...
