"""An httpx transport whose every socket operation honours a wall-clock deadline.

httpx has per-operation timeouts only (connect, each read, each write): a server that trickles its
response headers or body a byte at a time, each within the read timeout, holds a request for as long as
it likes, and name resolution (getaddrinfo) has no timeout at all. Here the network backend under httpx
clips every operation's timeout to the time left before the deadline of the exchange in progress on
this thread, resolves names in a helper thread it stops waiting for at the deadline, and records which
phase ran out (``dns``, ``connect``, ``tls``, ``send``, ``headers``, ``body``).

Use: ``with exchange(deadline_at) as ex: ...`` around ``client.stream(...)``; call ``ex.got_headers()``
once the response headers are in; after a timeout ``ex.phase`` names the phase that was running.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx
from httpcore._backends.sync import SyncStream

_local = threading.local()


class Exchange:
    """The deadline and the current phase of the one HTTP exchange running on this thread."""

    def __init__(self, deadline_at: float) -> None:
        self.deadline_at = deadline_at  # time.monotonic()
        self.phase = "connect"
        self.read_phase = "headers"
        self.deadline_hit = False  # the deadline (not a per-operation timeout) ended the exchange

    def got_headers(self) -> None:
        self.read_phase = "body"

    def left(self) -> float:
        return self.deadline_at - time.monotonic()

    def clip(self, timeout: float | None, phase: str, exc: type[Exception]) -> float:
        self.phase = phase
        left = self.left()
        if left <= 0:
            self.deadline_hit = True
            raise exc(f"deadline reached before {phase}")
        if timeout is None or left < timeout:
            return left
        return timeout


def current() -> Exchange | None:
    return getattr(_local, "exchange", None)


@contextmanager
def exchange(deadline_at: float) -> Iterator[Exchange]:
    ex = Exchange(deadline_at)
    previous = current()
    _local.exchange = ex
    try:
        yield ex
    finally:
        _local.exchange = previous


def _timed(ex: Exchange | None, timeout: float | None, phase: str, exc: type[Exception]) -> float | None:
    if ex is None:
        return timeout
    return ex.clip(timeout, phase, exc)


class _Stream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        ex = current()
        phase = ex.read_phase if ex else "read"
        t = _timed(ex, timeout, phase, httpcore.ReadTimeout)
        try:
            return self._inner.read(max_bytes, t)
        except httpcore.ReadTimeout:
            if ex is not None and ex.left() <= 0:
                ex.deadline_hit = True
            raise

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        ex = current()
        t = _timed(ex, timeout, "send", httpcore.WriteTimeout)
        self._inner.write(buffer, t)

    def close(self) -> None:
        self._inner.close()

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None):
        ex = current()
        t = _timed(ex, timeout, "tls", httpcore.ConnectTimeout)
        return _Stream(self._inner.start_tls(ssl_context, server_hostname, t))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


def _resolve(host: str, port: int, timeout: float | None) -> list[tuple]:
    """getaddrinfo, given up on after ``timeout`` seconds (the lookup thread is left to finish)."""
    try:
        ipaddress.ip_address(host.strip("[]"))
        return socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except ValueError:
        pass
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as e:
            box["error"] = e
        done.set()

    threading.Thread(target=run, name="verifier-dns", daemon=True).start()
    if not done.wait(timeout):
        raise httpcore.ConnectTimeout(f"name resolution of {host} did not finish in time")
    if "error" in box:
        raise httpcore.ConnectError(str(box["error"]))
    return box["infos"]


class DeadlineBackend(httpcore.NetworkBackend):
    """httpcore's synchronous socket backend, with the deadline of the current Exchange applied."""

    def __init__(self) -> None:
        self._sync = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        ex = current()
        infos = _resolve(host, port, _timed(ex, timeout, "dns", httpcore.ConnectTimeout))
        last: Exception | None = None
        for family, type_, proto, _, addr in infos:
            t = _timed(ex, timeout, "connect", httpcore.ConnectTimeout)
            sock = socket.socket(family, type_, proto)
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                if local_address is not None:
                    sock.bind((local_address, 0))
                sock.settimeout(t)
                sock.connect(addr)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except TimeoutError as e:
                sock.close()
                raise httpcore.ConnectTimeout(str(e) or "connect timed out") from None
            except OSError as e:
                sock.close()
                last = e
                continue
            return _Stream(SyncStream(sock))
        raise httpcore.ConnectError(str(last) if last else f"no address for {host}")

    def connect_unix_socket(self, path: str, timeout: float | None = None, socket_options=None):
        raise httpcore.ConnectError("unix sockets are not supported by the verifier transport")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def deadline_transport(limits: httpx.Limits) -> httpx.HTTPTransport:
    """An httpx.HTTPTransport (no proxy) whose connection pool uses DeadlineBackend."""
    transport = httpx.HTTPTransport(limits=limits)
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(),
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
        network_backend=DeadlineBackend(),
    )
    return transport
