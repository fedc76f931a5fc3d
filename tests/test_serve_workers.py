"""Operating `intent-router serve` across processes: SIGHUP reloads the model, config and key file in
place, and worker processes share a port, aggregate their metrics, reload together, stop with their
supervisor and get their share of connected clients. Real server processes on 127.0.0.1."""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import FAST, SHIPPED
from tests.test_serve import Server, error
from tests.test_serve_ops import (
    KEY_ADMIN,
    KEY_READER,
    broken_copy,
    key_file,
    model_id,
    reload,
    wait_for,
)

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


# ----------------------------------------------------------------------------------- SIGHUP
@pytest.mark.slow
def test_sighup_reloads_the_files_in_place_and_keeps_the_old_model_if_they_are_broken(tmp_path):
    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    log = tmp_path / "log"
    s = Server("--decision-log", str(log), "--decision-log-format", "parquet", model=model, tmp=tmp_path)
    try:
        assert s.client.get("/healthz").json()["model_id"] == model_id(SHIPPED)
        shutil.rmtree(model)
        broken_copy(FAST, model)
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload failed (SIGHUP)" in s.output(), what="a logged reload failure")
        assert "does not match the manifest" in s.output()
        assert s.client.get("/readyz").json()["model_id"] == model_id(SHIPPED)
        shutil.rmtree(model)
        shutil.copytree(FAST, model)
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: s.client.get("/healthz").json()["model_id"] == model_id(FAST), what="the new model")
        r = s.route({"role": "viewer", "message": "where is the travel policy"})
        assert r.status_code == 200 and r.json()["decisions"][0]["model_id"] == model_id(FAST)
        assert s.proc.poll() is None
    finally:
        s.stop()
    from router.decision_log import read_log

    (record,) = read_log(log)  # parquet: the pending record was written when the server shut down
    assert record["model_id"] == model_id(FAST) and record["message"] == "where is the travel policy"


@pytest.mark.slow
def test_a_reload_reads_the_key_file_again_and_keeps_the_old_keys_if_it_is_broken(tmp_path):
    """Keys are added, rotated and revoked without a restart: a reload reads the key file again. A key file
    that does not load fails the reload, and the keys and model of before keep serving."""
    from router.serve.auth import hash_key

    kf = key_file(tmp_path)
    rotated = "ir_ops-rotated-key-0123456789abcdef"
    body = {"role": "viewer", "message": "where is the travel policy"}
    s = Server("--key-file", str(kf), tmp=tmp_path)
    try:
        assert s.route(body, headers={"X-API-Key": KEY_READER}).status_code == 200
        assert error(s.route(body, headers={"X-API-Key": rotated}))["code"] == "bad_key"
        kf.write_text(
            "keys:\n"
            f"  - {{id: rotated, sha256: {hash_key(rotated)}, roles: [viewer]}}\n"
            f"  - {{id: deployer, sha256: {hash_key(KEY_ADMIN)}, admin: true}}\n"
        )
        r = reload(s)  # the admin key is in both files
        assert r.status_code == 200, r.text
        assert s.route(body, headers={"X-API-Key": rotated}).status_code == 200
        assert error(s.route(body, headers={"X-API-Key": KEY_READER}))["code"] == "bad_key"  # revoked

        kf.write_text("keys:\n  - {id: rotated, sha256: not-a-hash, roles: [viewer]}\n")
        s.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: "reload failed (SIGHUP)" in s.output(), what="a logged reload failure")
        assert "'sha256' must be 64 hex digits" in s.output()
        r = reload(s)  # the admin key of before still authenticates
        e = error(r)
        assert r.status_code == 422 and e["code"] == "reload_failed" and "64 hex digits" in e["message"]
        assert e["message"].startswith("nothing was reloaded, still serving")
        assert s.route(body, headers={"X-API-Key": rotated}).status_code == 200
    finally:
        s.stop()


# ---------------------------------------------------------------------------------- workers
def route_anew(s: Server, message: str) -> httpx.Response:
    """On a new connection, which either worker may accept."""
    body, headers = {"role": "viewer", "message": message}, {"X-API-Key": KEY_READER, "Connection": "close"}
    return httpx.post(f"{s.url}/v1/route", json=body, headers=headers, timeout=10)


@pytest.mark.slow
def test_two_workers_serve_aggregate_metrics_and_reload_together(tmp_path):
    log = tmp_path / "log"
    s = Server(
        "--workers", "2", "--key-file", str(key_file(tmp_path)), "--decision-log", str(log), tmp=tmp_path
    )
    try:
        pids: dict[int, str] = {}

        def both_ready() -> bool:  # a new connection each time: either worker may accept it
            r = httpx.get(f"{s.url}/readyz", timeout=10)
            if r.status_code == 200:
                pids[r.json()["pid"]] = r.json()["model_id"]
            return len(pids) == 2

        wait_for(both_ready, what="both workers ready")
        assert set(pids.values()) == {model_id(SHIPPED)} and s.proc.pid not in pids
        n = 40
        for i in range(n):
            assert route_anew(s, f"where is the travel policy {i}").status_code == 200
        old = f'model="{model_id(SHIPPED)}"'
        for _ in range(4):  # whichever worker answers, the metrics are the sum of both
            text = httpx.get(f"{s.url}/metrics", headers={"Connection": "close"}).text
            assert f'intent_router_requests_total{{{old},path="/v1/route",status="200"}} {n}.0' in text
            assert f"intent_router_messages_total{{{old}}} {n}.0" in text
            assert f"intent_router_model{{{old}}} 2.0" in text and "intent_router_ready 1.0" in text

        r = reload(s, {"model": str(FAST)})
        assert r.status_code == 200 and r.json()["other_workers"] == 1, r.text
        pids.clear()

        def both_reloaded() -> bool:
            r = httpx.get(f"{s.url}/healthz", timeout=10)
            pids[r.json()["pid"]] = r.json()["model_id"]
            return len(pids) == 2 and set(pids.values()) == {model_id(FAST)}

        wait_for(both_reloaded, what="both workers on the new model")

        # a worker that dies is replaced; the new one loads the reloaded model before it accepts
        first = set(pids)
        victim = next(iter(first))
        os.kill(victim, signal.SIGKILL)
        statuses = []
        while not set(pids) - first:
            assert len(statuses) < 500, "no replacement worker answered"
            statuses.append(route_anew(s, "where is the travel policy").status_code)
            h = httpx.get(f"{s.url}/healthz", headers={"Connection": "close"}).json()
            pids[h["pid"]] = h["model_id"]
        assert set(statuses) == {200}  # no request refused while the replacement loaded
        assert set(pids.values()) == {model_id(FAST)}  # the replacement loaded the reloaded model
        assert "exited with code -9; starting another" in s.output()
        text = httpx.get(f"{s.url}/metrics").text  # the dead worker's counts are kept
        new = f'model="{model_id(FAST)}"'
        sent = n + len(statuses)
        counts = [
            re.search(
                rf'intent_router_requests_total\{{{re.escape(m)},path="/v1/route",status="200"\}} (\S+)', text
            )
            for m in (old, new)
        ]
        assert sum(float(c.group(1)) for c in counts) == sent
        run_dir = Path(re.search(r"run directory (\S+)", s.output()).group(1))
        assert (run_dir / "metrics").is_dir()
    finally:
        code = s.stop()
    assert code == 0
    assert not run_dir.exists()  # the supervisor removed the metrics files and the reload target
    from router.decision_log import log_files, read_log

    files = log_files(log)  # jsonl: each record written as it is routed, so the killed worker's are there
    assert {int(f.name.split("-")[2]) for f in files} <= set(pids)  # a file per worker process
    assert len(list(read_log(log))) == sent


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie, exited but not yet reaped, holds no socket)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.slow
def test_workers_stop_when_their_supervisor_is_killed_and_a_new_serve_takes_the_port(tmp_path):
    s = Server("--workers", "2", tmp=tmp_path)
    pids: set[int] = set()

    def both_ready() -> bool:  # a new connection each time: either worker may accept it
        r = httpx.get(f"{s.url}/readyz", headers={"Connection": "close"}, timeout=10)
        if r.status_code == 200:
            pids.add(r.json()["pid"])
        return len(pids) == 2

    try:
        wait_for(both_ready, what="both workers ready")
        os.kill(s.proc.pid, signal.SIGKILL)  # the supervisor cannot pass this on to its workers
        s.proc.wait()
        killed = time.monotonic()
        wait_for(lambda: not any(_running(p) for p in pids), timeout=5, what="the workers gone")
        gone = time.monotonic() - killed
        assert f"the supervisor (pid {s.proc.pid}) is gone: this worker stops" in s.output()
    finally:
        s.stop()
        for pid in pids:  # a failed test leaves no worker behind
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    again = Server(tmp=tmp_path, port=s.port)  # the port is free again
    try:
        assert again.route({"role": "viewer", "message": "where is the travel policy"}).status_code == 200
    finally:
        assert again.stop() == 0
    assert gone < 5


@pytest.mark.slow
def test_a_replaced_worker_gets_requests_from_clients_that_were_connected_before(tmp_path):
    """Keep-alive clients all connected to one worker; the other is killed and replaced. Their connections
    end after --max-connection-age, so their next requests reach the replacement too."""
    s = Server("--workers", "2", "--max-connection-age", "1", tmp=tmp_path)
    fresh = {"Connection": "close"}  # a new connection each time: either worker may accept it
    pids: set[int] = set()
    clients: list[httpx.Client] = []
    try:
        wait_for(
            lambda: pids.add(httpx.get(f"{s.url}/healthz", headers=fresh).json()["pid"]) or len(pids) == 2
        )
        victim, survivor = sorted(pids)
        for _ in range(40):  # keep 4 clients whose one connection is with the survivor
            c = httpx.Client(base_url=s.url, timeout=10)
            (clients if c.get("/healthz").json()["pid"] == survivor else []).append(c)
            if len(clients) == 4:
                break
        assert len(clients) == 4
        os.kill(victim, signal.SIGKILL)

        def replaced() -> bool:
            r = httpx.get(f"{s.url}/readyz", headers=fresh, timeout=10)
            return r.status_code == 200 and r.json()["pid"] not in pids

        wait_for(replaced, timeout=60, what="the replacement ready")
        seen: list[int] = []
        end = time.monotonic() + 6
        while time.monotonic() < end:
            seen += [c.get("/healthz").json()["pid"] for c in clients]
            time.sleep(0.05)
        assert set(seen) - pids, f"every request of the connected clients went to {set(seen)}"
    finally:
        for c in clients:
            c.close()
        assert s.stop() == 0
