"""`intent-router serve`'s life: ready only once its model loads, never ready when it fails to, and a
slow verifier that blocks nobody while a shutdown finishes the requests in flight. Real processes."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest

from tests.openai_server import OpenAIServer, Reply
from tests.test_serve import Server, error

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.mark.slow
def test_ready_only_after_the_model_loads(tmp_path):
    s = Server("--load-delay", "3", wait_ready=False, tmp=tmp_path)
    try:
        assert s.client.get("/healthz").status_code == 200
        r = s.client.get("/readyz")
        assert r.status_code == 503 and error(r)["code"] == "loading"
        r = s.route({"role": "viewer", "message": "where is the travel policy"})
        assert r.status_code == 503 and error(r)["code"] == "not_ready"
        m = s.client.get("/metrics").text
        assert "intent_router_ready 0.0" in m
        s.wait("/readyz")
        assert s.route({"role": "viewer", "message": "where is the travel policy"}).status_code == 200
        assert "intent_router_ready 1.0" in s.client.get("/metrics").text
    finally:
        s.stop()


@pytest.mark.slow
def test_a_model_that_fails_to_load_is_never_ready(tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "manifest.json").write_text("{}")
    s = Server("--model", str(bad), wait_ready=False, tmp=tmp_path)
    try:
        time.sleep(1.5)
        r = s.client.get("/readyz")
        assert r.status_code == 503 and error(r)["code"] == "model_failed"
        assert s.client.get("/healthz").status_code == 200
    finally:
        s.stop()


@pytest.mark.slow
def test_slow_verifier_blocks_nobody_and_shutdown_finishes_in_flight(tmp_path):
    llm = OpenAIServer().start()
    llm.default = Reply(content='{"intent": "SEARCH", "reason_code": "fresh_request"}', delay=2.0)
    s = Server(
        "--threshold",
        "1.0",
        "--verifier-url",
        llm.base_url,
        "--verifier-timeout",
        "5",
        tmp=tmp_path,
        wait_ready=True,
    )
    try:
        result = {}

        def slow():
            with httpx.Client(base_url=s.url, timeout=20) as c:
                result["r"] = c.post(
                    "/v1/route", json={"role": "viewer", "message": "where is the travel policy"}
                )

        t = threading.Thread(target=slow)
        t.start()
        time.sleep(0.5)  # the verifier call is in flight
        t0 = time.monotonic()
        assert s.client.get("/healthz").status_code == 200
        r = s.route({"role": "viewer", "message": "???"})  # guardrail: never reaches the verifier
        assert r.status_code == 200 and r.json()["decisions"][0]["source"] == "guardrail"
        assert time.monotonic() - t0 < 1.0
        s.proc.send_signal(signal.SIGTERM)  # graceful: the in-flight request still gets its answer
        t.join(20)
        assert result["r"].status_code == 200
        d = result["r"].json()["decisions"][0]
        assert d["source"] == "verifier" and d["intent"] == "SEARCH"
        assert s.proc.wait(20) == 0  # a graceful stop, as the --workers supervisor's
    finally:
        s.stop()
        llm.stop()
