"""Circuit breaker for the LLM verifier: a dead endpoint does not add its timeout to every request."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("router.verifier")


class CircuitBreaker:
    """closed -> (``failures`` consecutive failures) -> open -> (``cooldown`` s) -> half_open: one trial call;
    its success closes the breaker, its failure opens it again. Thread-safe."""

    CLOSED, OPEN, HALF_OPEN = "closed", "open", "half_open"

    def __init__(
        self, failures: int = 3, cooldown: float = 30.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        if failures < 1:
            raise ValueError("failures must be >= 1")
        self.failures = failures
        self.cooldown = float(cooldown)
        self._clock = clock
        self._lock = threading.Lock()
        self._state = self.CLOSED
        self._consecutive = 0
        self._opened_at = 0.0
        self._probe_in_flight = False

    def _refresh(self) -> None:  # under the lock
        if self._state == self.OPEN and self._clock() - self._opened_at >= self.cooldown:
            self._state, self._probe_in_flight = self.HALF_OPEN, False

    @property
    def state(self) -> str:
        with self._lock:
            self._refresh()
            return self._state

    @property
    def consecutive_failures(self) -> int:
        with self._lock:
            return self._consecutive

    def retry_in(self) -> float:
        """Seconds until an open breaker lets a trial call through (0 when not open)."""
        with self._lock:
            self._refresh()
            if self._state != self.OPEN:
                return 0.0
            return max(0.0, self.cooldown - (self._clock() - self._opened_at))

    def acquire(self) -> str | None:
        """Permission to call: the state the call is made in ("closed" or "half_open"), or None (do not call)."""
        with self._lock:
            self._refresh()
            if self._state == self.OPEN:
                return None
            if self._state == self.HALF_OPEN:
                if self._probe_in_flight:
                    return None
                self._probe_in_flight = True
                return self.HALF_OPEN
            return self.CLOSED

    def record_success(self) -> None:
        with self._lock:
            self._state, self._consecutive, self._probe_in_flight = self.CLOSED, 0, False

    def record_failure(self, was_probe: bool = False) -> None:
        with self._lock:
            self._refresh()
            if self._state == self.HALF_OPEN:
                if not was_probe:  # a call started before the breaker opened; the trial call decides
                    return
                self._open()
            elif self._state == self.CLOSED:
                self._consecutive += 1
                if self._consecutive >= self.failures:
                    self._open()

    def _open(self) -> None:  # under the lock
        self._state, self._opened_at, self._probe_in_flight = self.OPEN, self._clock(), False
        log.warning(
            "LLM verifier circuit breaker open for %.1f s after %d consecutive failure(s)",
            self.cooldown,
            self._consecutive,
        )
