"""Keep-alive connections with a maximum age, so that load spreads again over the workers.

The workers of ``serve --workers N`` accept connections on one socket, and a client's keep-alive
connection stays with the worker that accepted it. A worker that starts later, replacing one that exited,
would get no request from clients already connected. ``ConnectionAge`` ends a connection once it is
older than ``max_age`` seconds: the response carries ``Connection: close`` (uvicorn then closes the
connection after it), and the client's next request opens a new connection, which any worker may accept.
A request in flight is never cut; the cost is one TCP connect per client every ``max_age`` seconds.

A connection is known by its client address and port, which it keeps while it is open. Entries of
connections that closed on their own are pruned once they are much older than ``max_age``.
"""

from __future__ import annotations

import time

PRUNE_EVERY = 1024  # requests between prunings of closed connections' entries


class ConnectionAge:
    """ASGI middleware: ``Connection: close`` on the first response after a connection's ``max_age``."""

    def __init__(self, app, max_age: float) -> None:
        if max_age <= 0:
            raise ValueError(f"max_age must be > 0 seconds, got {max_age}")
        self.app, self.max_age = app, max_age
        self.opened: dict[tuple, float] = {}
        self._requests = 0

    async def __call__(self, scope, receive, send) -> None:
        client = scope.get("client") if scope["type"] == "http" else None
        if client is None:
            await self.app(scope, receive, send)
            return
        now = time.monotonic()
        key = tuple(client)
        opened = self.opened.setdefault(key, now)
        self._requests += 1
        if self._requests % PRUNE_EVERY == 0:
            self._prune(now)
        if now - opened < self.max_age:
            await self.app(scope, receive, send)
            return
        del self.opened[key]  # the next request from this address and port is a new connection

        async def closing(message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)

    def _prune(self, now: float) -> None:
        stale = [k for k, t in self.opened.items() if now - t > 4 * self.max_age]
        for k in stale:
            del self.opened[k]
