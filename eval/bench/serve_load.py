"""Load-test `intent-router serve` on 127.0.0.1: ``intent-router bench serve [--server-args=...]``.

Starts the server in its own process (with a key file), and drives it from this process with a
small asyncio HTTP/1.1 client (keep-alive, no third-party code, so the generator costs little CPU
beside the server on a 2-core machine). Reports:

- ``in_process``: p50/p99 of Router.route() on the same messages, and ``http_sequential``: one client,
  one request at a time; ``http_added_p50_ms`` is the difference;
- ``open_loop``: fixed request rates (arrivals on a timer, not waiting for answers; latency counted
  from the scheduled send time, so a stalled server cannot hide its queue), and ``max_rate_p99_20ms``;
- ``closed_loop_32``: throughput and latency with 32 clients sending back to back;
- ``faults``: 1,000 malformed requests -> status counts (must be 4xx only), and a valid request after.

Every answer is counted by its HTTP status, or by the exception's type name when the connection failed
(``ConnectionClosed``: the server closed a keep-alive connection without answering); each phase's counts
are printed to stderr and kept in the JSON (``statuses``; ``statuses`` at the top level sums the load
phases). The server's output goes to ``server_log``.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

KEY = "ir_bench-key-000000000000000000000000"
READY_TIMEOUT = 180.0  # seconds: `serve --ray` starts a local Ray cluster first


def _pct(xs: list[float]) -> dict:
    if not xs:
        return {}
    a = np.asarray(xs) * 1000
    return {k: round(float(np.percentile(a, q)), 3) for k, q in (("p50", 50), ("p90", 90), ("p99", 99))} | {
        "max": round(float(a.max()), 3)
    }


class ConnectionClosed(ConnectionError):
    """The server closed a keep-alive connection without answering the request sent on it."""


def count(statuses: dict[str, int], status: int | str) -> None:
    statuses[str(status)] = statuses.get(str(status), 0) + 1


def _sorted(statuses: dict[str, int]) -> dict[str, int]:
    return dict(sorted(statuses.items()))


class Conn:
    def __init__(self, port: int) -> None:
        self.port = port
        self.r = self.w = None

    async def open(self) -> None:
        self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)

    async def request(
        self, body: bytes, headers: dict[str, str] | None = None, path: str = "/v1/route"
    ) -> tuple[int | str, bytes]:
        """(HTTP status, body), or (the exception's type name, b"") when the connection failed."""
        if self.r is not None and self.r.at_eof():  # the server closed it while idle: never reuse it
            self.close()
        try:
            if self.w is None:
                await self.open()
        except OSError as e:
            return type(e).__name__, b""
        h = {"Host": "127.0.0.1", "Content-Type": "application/json", "Content-Length": str(len(body))}
        h.update(headers if headers is not None else {"X-API-Key": KEY})
        head = f"POST {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
        try:
            self.w.write(head.encode("latin-1") + body)
            await self.w.drain()
            status_line = await self.r.readline()
            if not status_line:
                raise ConnectionClosed("the server closed the connection before answering")
            status = int(status_line.split()[1])
            length, close = 0, False
            while True:
                line = await self.r.readline()
                if line in (b"\r\n", b""):
                    break
                k, _, v = line.decode("latin-1").partition(":")
                k = k.strip().lower()
                if k == "content-length":
                    length = int(v)
                elif k == "connection" and "close" in v.lower():
                    close = True
            data = await self.r.readexactly(length)
        except (ConnectionError, asyncio.IncompleteReadError, OSError, ValueError, IndexError) as e:
            self.close()
            return type(e).__name__, b""
        if close:
            self.close()
        return status, data

    def close(self) -> None:
        if self.w is not None:
            self.w.close()
        self.r = self.w = None


def _body(msg: str, role: str = "viewer") -> bytes:
    return json.dumps({"role": role, "message": msg}).encode()


async def paired(port: int, router, msgs: list[str], n: int) -> tuple[list[float], list[float]]:
    """Each message in-process, then over HTTP, alternately: both see the same machine load."""
    c, local, http = Conn(port), [], []
    for i in range(n):
        m = msgs[i % len(msgs)]
        t0 = time.perf_counter()
        router.route(m, "viewer")
        local.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        s, _ = await c.request(_body(m))
        http.append(time.perf_counter() - t0)
        assert s == 200, s
    c.close()
    return local, http


async def reload_at(port: int, model: str, at: float, out: list[dict]) -> None:
    """POST /admin/reload to ``model`` at ``at`` (perf_counter time); its answer is appended to ``out``."""
    await asyncio.sleep(max(0.0, at - time.perf_counter()))
    c, t0 = Conn(port), time.perf_counter()
    status, body = await c.request(json.dumps({"model": model}).encode(), path="/admin/reload")
    c.close()
    answer = json.loads(body) if body else {}
    error = answer.get("error", {})
    out.append(
        {
            "model": model,
            "status": status,
            "seconds": round(time.perf_counter() - t0, 3),
            "model_id": answer.get("model_id", error.get("model_id")),
            "code": error.get("code"),
            "message": error.get("message"),
        }
    )


async def open_loop(
    port: int, msgs: list[str], rate: float, seconds: float, reloads: list[str] | None = None
) -> dict:
    """Requests at ``rate`` for ``seconds``; with ``reloads``, an admin reload to each model directory in
    turn, spread over the run (the answers under "reloads")."""
    idle: list[Conn] = []
    lat: list[float] = []
    statuses: dict[str, int] = {}
    n = int(rate * seconds)
    start = time.perf_counter() + 0.05

    async def one(i: int, at: float) -> None:
        c = idle.pop() if idle else Conn(port)
        s, _ = await c.request(_body(msgs[i % len(msgs)]))
        lat.append(time.perf_counter() - at)
        count(statuses, s)
        idle.append(c)

    answers: list[dict] = []
    tasks = [
        asyncio.create_task(reload_at(port, m, start + seconds * (k + 1) / (len(reloads) + 1), answers))
        for k, m in enumerate(reloads or [])
    ]
    for i in range(n):
        at = start + i / rate
        delay = at - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, at)))
    await asyncio.gather(*tasks)
    wall = time.perf_counter() - start
    for c in idle:
        c.close()
    errors = n - statuses.get("200", 0)
    return {
        "rate": rate,
        "sent": n,
        "errors": errors,
        "statuses": _sorted(statuses),
        "achieved_rps": round(n / wall, 1),
        **_pct(lat),
        **({"reloads": answers} if reloads else {}),
    }


async def closed_loop(port: int, msgs: list[str], clients: int, seconds: float) -> dict:
    lat: list[float] = []
    end = time.perf_counter() + seconds
    statuses: dict[str, int] = {}

    async def worker(k: int) -> None:
        c, i = Conn(port), k
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            s, _ = await c.request(_body(msgs[i % len(msgs)]))
            lat.append(time.perf_counter() - t0)
            count(statuses, s)
            i += clients
        c.close()

    t0 = time.perf_counter()
    await asyncio.gather(*(worker(k) for k in range(clients)))
    wall = time.perf_counter() - t0
    return {
        "clients": clients,
        "requests": len(lat),
        "errors": len(lat) - statuses.get("200", 0),
        "statuses": _sorted(statuses),
        "rps": round(len(lat) / wall, 1),
        **_pct(lat),
    }


def malformed(i: int, msgs: list[str]) -> tuple[bytes, dict[str, str] | None]:
    """1,000 kinds of wrong: bad JSON, wrong types, huge bodies, unknown roles, missing or bad keys."""
    m = msgs[i % len(msgs)]
    kind = i % 10
    auth = {"X-API-Key": KEY}
    if kind == 0:
        return b'{"role": "viewer", "message": ' + m.encode()[: i % 20], auth  # truncated JSON
    if kind == 1:
        return bytes(random.Random(i).getrandbits(8) for _ in range(64)), auth  # binary junk
    if kind == 2:
        return json.dumps({"role": "viewer", "message": i}).encode(), auth  # wrong type
    if kind == 3:
        return json.dumps({"role": ["admin"], "messages": m}).encode(), auth  # wrong types
    if kind == 4:
        return json.dumps({"role": "viewer", "message": "x" * 1_100_000}).encode(), auth  # > 1 MiB body
    if kind == 5:
        return json.dumps({"role": "viewer", "messages": [m] * 65}).encode(), auth  # too many messages
    if kind == 6:
        return json.dumps({"role": "root", "message": m}).encode(), auth  # unknown role
    if kind == 7:
        return _body(m), {}  # missing key
    if kind == 8:
        return _body(m), {"Authorization": f"Bearer wrong-{i}"}  # bad key
    return json.dumps({"role": "viewer", "message": "y" * 10_001}).encode(), auth  # message too long


async def faults(port: int, msgs: list[str], n: int = 1000) -> dict:
    statuses: dict[str, int] = {}
    c = Conn(port)
    for i in range(n):
        body, headers = malformed(i, msgs)
        s, _ = await c.request(body, headers)
        count(statuses, s)
    ok, _ = await Conn(port).request(_body("where is the travel policy"))
    return {
        "sent": n,
        "statuses": dict(sorted(statuses.items())),
        "only_4xx": all(s.isdigit() and 400 <= int(s) < 500 for s in statuses),
        "valid_after": ok,
    }


def start_server(port: int, keyfile: Path, extra: list[str], log: Path) -> subprocess.Popen:
    """The server, its output (warnings and errors) written to ``log``."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "cli", "serve", "--port", str(port), "--key-file", str(keyfile)]
    cmd += ["--log-level", "warning", *extra]
    with log.open("wb") as fh:
        p = subprocess.Popen(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT)
    import httpx

    end = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < end and p.poll() is None:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return p
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"server did not become ready; its output: {log}")


def load_router():
    from router.routing import Router

    r = Router.load()
    for m in ("where is the travel policy", "restart the indexing service"):
        r.route(m, "viewer")
    return r


def run_bench_serve(
    rates: list[float],
    seconds: float = 8.0,
    sequential: int = 500,
    with_faults: bool = True,
    server_args: list[str] | None = None,
    data: Path = Path("data/test.jsonl"),
    reloads: list[str] | None = None,
) -> dict:
    """Start the server with ``server_args`` and drive it with the messages of ``data``: sequential
    requests beside in-process routing, open loop at each of ``rates`` (stopping once p99 passes
    100 ms; the first rate with an admin reload to each of ``reloads`` during it), 32 closed-loop
    clients, and (``with_faults``) 1,000 malformed requests."""
    from router.serve.auth import hash_key

    msgs = [json.loads(line)["text"] for line in data.read_text().splitlines() if line]
    tmp = Path(tempfile.mkdtemp())
    kf = tmp / "keys.yaml"
    kf.write_text(f"keys:\n  - {{id: bench, sha256: {hash_key(KEY)}, roles: [viewer, admin], admin: true}}\n")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    extra = list(server_args or [])
    log = tmp / "serve.log"
    out: dict = {"server_args": extra, "load_avg_before": os.getloadavg(), "server_log": str(log)}
    router = load_router()
    proc = start_server(port, kf, extra, log)
    try:
        local, seq = asyncio.run(paired(port, router, msgs, sequential))
        out["in_process"] = _pct(local)
        out["http_sequential"] = _pct(seq)
        out["http_added_p50_ms"] = round(out["http_sequential"]["p50"] - out["in_process"]["p50"], 3)
        out["open_loop"] = []
        for k, rate in enumerate(rates):
            r = asyncio.run(open_loop(port, msgs, rate, seconds, reloads if k == 0 else None))
            for a in r.get("reloads", []):
                print(f"reload to {a['model']}: {a['status']} {a['code'] or a['model_id']}", file=sys.stderr)
            out["open_loop"].append(r)
            _print_statuses(f"open loop {rate:g}/s", r["statuses"], f"p50 {r['p50']} p99 {r['p99']} ms")
            if r["p99"] > 100:  # far past the goal: higher rates only queue up
                break
        held = [r["rate"] for r in out["open_loop"] if r["p99"] <= 20 and r["errors"] == 0]
        out["max_rate_p99_20ms"] = max(held) if held else None
        c = out["closed_loop_32"] = asyncio.run(closed_loop(port, msgs, 32, seconds))
        _print_statuses("closed loop, 32 clients", c["statuses"], f"{c['rps']} requests/s")
        if with_faults:
            f = out["faults"] = asyncio.run(faults(port, msgs))
            _print_statuses("faults", f["statuses"], f"valid request after: {f['valid_after']}")
        out["server_alive"] = proc.poll() is None
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    out["statuses"] = _total(out)
    out["load_avg_after"] = os.getloadavg()
    return out


def _print_statuses(phase: str, statuses: dict[str, int], note: str) -> None:
    counts = ", ".join(f"{k}: {v}" for k, v in statuses.items())
    print(f"{phase}: {counts} ({note})", file=sys.stderr)


def _total(out: dict) -> dict[str, int]:
    """Every answer of the load phases (open and closed loop) by status code or connection error."""
    total: dict[str, int] = {}
    for r in [*out.get("open_loop", []), out.get("closed_loop_32", {})]:
        for k, v in r.get("statuses", {}).items():
            total[k] = total.get(k, 0) + v
    return _sorted(total)
