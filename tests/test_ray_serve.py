"""`intent-router serve --ray`: the same HTTP API as replicas on a local Ray cluster, with the same keys,
decision log and reloads, which reach every replica."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import FAST, ROOT, SHIPPED
from tests.test_serve import free_port
from tests.test_serve_ops import KEY_ADMIN, KEY_READER, key_file, model_id

pytest.importorskip("ray.serve")
pytest.importorskip("fastapi")


def fresh(url: str, path: str, **kw) -> httpx.Response:
    """A request on a new connection: Ray's proxy may give it to either replica."""
    return httpx.get(url + path, headers={"Connection": "close"}, timeout=10, **kw)


def wait_for(check, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if check():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(what)


@pytest.mark.slow
def test_two_replicas_on_a_local_ray_cluster_answer_the_same_api_and_reload_together(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "serve.log"
    cmd = [sys.executable, str(ROOT / "cli.py"), "serve", "--ray", "--replicas", "2", "--port", str(port)]
    cmd += ["--model", str(SHIPPED), "--key-file", str(key_file(tmp_path))]
    cmd += ["--decision-log", str(tmp_path / "decisions")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "INTENT_ROUTER_THREADS": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: fresh(url, "/readyz").status_code == 200, 180, f"ready: {log.read_text()}")
        pids: set[int] = set()
        wait_for(lambda: pids.add(fresh(url, "/healthz").json()["pid"]) or len(pids) == 2, 60, "two replicas")

        body = {"role": "viewer", "message": "where is the travel policy"}
        assert httpx.post(url + "/v1/route", json=body, timeout=10).status_code == 401  # the same keys
        r = httpx.post(url + "/v1/route", json=body, headers={"X-API-Key": KEY_READER}, timeout=10)
        assert r.status_code == 200 and r.json()["decisions"][0]["model_id"] == model_id(SHIPPED)

        r = httpx.post(
            url + "/admin/reload",
            json={"model": str(FAST)},
            headers={"X-API-Key": KEY_ADMIN},
            timeout=60,
        )
        assert r.status_code == 200 and r.json()["model_id"] == model_id(FAST), r.text
        seen: dict[int, str] = {}

        def both_reloaded() -> bool:
            h = fresh(url, "/healthz").json()
            seen[h["pid"]] = h["model_id"]
            return len(seen) == 2 and set(seen.values()) == {model_id(FAST)}

        wait_for(both_reloaded, 30, f"both replicas on the fast model: {seen}")
        records = [
            json.loads(line)
            for f in (tmp_path / "decisions").glob("*.jsonl")
            for line in f.read_text().splitlines()
        ]
        assert [r["message"] for r in records] == ["where is the travel policy"]
        assert records[0]["key_id"] == "reader"
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(120)
    assert code == 0, log.read_text()
