"""`intent-router serve` in a real uvicorn process on 127.0.0.1, with the shipped model."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import SHIPPED

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Server:
    """``intent-router serve`` in its own process on a free loopback port, its output in a log file."""

    def __init__(
        self,
        *args: str,
        wait_ready: bool = True,
        tmp: Path | None = None,
        model: Path = SHIPPED,
        port: int | None = None,
    ) -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = (tmp or Path("/tmp")) / f"serve-{self.port}.log"
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "INTENT_ROUTER_THREADS": "1"}
        cmd = [sys.executable, str(ROOT / "cli.py"), "serve", "--port", str(self.port), "--model", str(model)]
        self._log = open(self.log, "w")  # noqa: SIM115  (closed in stop())
        self.proc = subprocess.Popen(
            [*cmd, *args], cwd=ROOT, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )
        self.client = httpx.Client(base_url=self.url, timeout=10)
        self.wait("/healthz")
        if wait_ready:
            self.wait("/readyz")

    def wait(self, path: str, timeout: float = 30) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited {self.proc.returncode}: {self.output()}")
            try:
                if self.client.get(path).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise TimeoutError(f"{path} not 200 after {timeout} s: {self.output()}")

    def route(self, body, **kw) -> httpx.Response:
        return self.client.post("/v1/route", json=body, **kw)

    def output(self) -> str:
        self._log.flush()
        return self.log.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()
        self._log.close()
        return self.proc.returncode


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(
        "--max-body-bytes",
        "4000",
        "--max-messages",
        "4",
        "--max-chars",
        "300",
        tmp=tmp_path_factory.mktemp("srv"),
    )
    yield s
    s.stop()


KEY_VIEWER = "ir_test-viewer-key-0123456789abcdef"
KEY_ADMIN = "ir_test-admin-key-0123456789abcdef"


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    from router.serve.auth import hash_key

    tmp = tmp_path_factory.mktemp("keyed")
    kf = tmp / "keys.yaml"
    kf.write_text(
        "keys:\n"
        f"  - {{id: reader, sha256: {hash_key(KEY_VIEWER)}, roles: [viewer]}}\n"
        f"  - {{id: ops, sha256: {hash_key(KEY_ADMIN)}, roles: [admin, analyst]}}\n"
    )
    s = Server("--key-file", str(kf), tmp=tmp)
    yield s
    s.stop()


def error(r: httpx.Response) -> dict:
    body = r.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] and body["error"]["message"]
    return body["error"]


# ------------------------------------------------------------------------------------ route
def test_route_one_message(server):
    r = server.route({"role": "admin", "message": "restart the indexing service"})
    assert r.status_code == 200
    (d,) = r.json()["decisions"]
    assert d["intent"] == "ACTION" and d["source"] == "classifier" and d["reason_code"] == "confident"
    assert "action" in d["skills"]["required"] and d["role"] == "admin" and d["servable"]


def test_route_batch_keeps_order_and_rbac(server):
    msgs = ["restart the indexing service", "where is the travel policy", "???"]
    r = server.route({"role": "viewer", "messages": msgs})
    assert r.status_code == 200
    ds = r.json()["decisions"]
    assert [d["intent"] for d in ds] == ["ACTION", "SEARCH", None]
    assert ds[0]["servable"] is False and any(x["skill"] == "action" for x in ds[0]["denied"])
    assert ds[2]["source"] == "guardrail" and ds[2]["reason_code"] == "low_signal"


def test_concurrent_requests_get_their_own_answers(server):
    msgs = ["restart the indexing service", "where is the travel policy"] * 10
    with httpx.Client(base_url=server.url, timeout=10) as c:
        results = [None] * len(msgs)

        def one(i):
            results[i] = c.post("/v1/route", json={"role": "admin", "message": msgs[i]}).json()

        threads = [threading.Thread(target=one, args=(i,)) for i in range(len(msgs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert [r["decisions"][0]["intent"] for r in results] == ["ACTION", "SEARCH"] * 10


# ----------------------------------------------------------------------------------- limits
def test_body_too_large_is_413(server):
    r = server.route({"role": "viewer", "message": "x" * 5000})
    assert r.status_code == 413 and error(r)["code"] == "body_too_large" and error(r)["limit"] == 4000


def test_chunked_body_too_large_is_413(server):
    def gen():
        yield b'{"role": "viewer", "message": "'
        for _ in range(10):
            yield b"y" * 1000
        yield b'"}'

    r = server.client.post("/v1/route", content=gen(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and error(r)["code"] == "body_too_large"


def test_too_many_messages_and_too_long_are_422(server):
    r = server.route({"role": "viewer", "messages": ["a b c"] * 5})
    assert r.status_code == 422 and error(r)["code"] == "too_many_messages" and error(r)["limit"] == 4
    r = server.route({"role": "viewer", "messages": ["ok", "z" * 301]})
    e = error(r)
    assert r.status_code == 422 and e["code"] == "message_too_long" and e["index"] == 1


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{not json", 400, "invalid_json"),
        (b"[1, 2]", 422, "invalid_request"),
        (b'{"role": "viewer", "message": 5}', 422, "invalid_request"),
        (b'{"role": "viewer", "messages": "one"}', 422, "invalid_request"),
        (b'{"role": "viewer", "message": "a", "messages": ["b"]}', 422, "invalid_request"),
        (b'{"role": "viewer"}', 422, "invalid_request"),
        (b'{"role": "viewer", "messages": []}', 422, "no_messages"),
        (b'{"role": "viewer", "message": "hi", "extra": 1}', 422, "invalid_request"),
        (b'{"message": "hi"}', 422, "missing_role"),
        (b'{"role": "root", "message": "hi"}', 422, "unknown_role"),
        (b"\xff\xfe", 400, "invalid_json"),
    ],
)
def test_malformed_requests_get_clear_4xx(server, body, status, code):
    r = server.client.post("/v1/route", content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    assert error(r)["code"] == code


def test_unknown_path_and_method_use_the_error_format(server):
    assert error(server.client.get("/nope"))["code"] == "not_found"
    assert error(server.client.get("/v1/route"))["code"] == "method_not_allowed"


# ------------------------------------------------------------------------------------- auth
def test_no_key_file_listens_on_loopback_only(server):
    assert "no key file: listening on loopback only" in server.output()
    r = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "serve", "--host", "0.0.0.0", "--port", str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "without a key file" in r.stderr


def test_key_file_maps_keys_to_roles(keyed):
    r = keyed.route({"role": "viewer", "message": "where is the travel policy"})
    assert r.status_code == 401 and error(r)["code"] == "missing_key"
    r = keyed.route({"role": "viewer", "message": "hi"}, headers={"Authorization": "Bearer nope"})
    assert r.status_code == 401 and error(r)["code"] == "bad_key"
    ok = keyed.route(
        {"role": "viewer", "message": "where is the travel policy"}, headers={"X-API-Key": KEY_VIEWER}
    )
    assert ok.status_code == 200 and ok.json()["decisions"][0]["role"] == "viewer"
    # the only role of the key is used when none is named
    r = keyed.route(
        {"message": "where is the travel policy"}, headers={"Authorization": f"Bearer {KEY_VIEWER}"}
    )
    assert r.status_code == 200 and r.json()["decisions"][0]["role"] == "viewer"
    # a key with two roles must name one
    r = keyed.route({"message": "hi there"}, headers={"X-API-Key": KEY_ADMIN})
    assert r.status_code == 422 and error(r)["code"] == "missing_role"
    r = keyed.route(
        {"role": "admin", "message": "restart the indexing service"}, headers={"X-API-Key": KEY_ADMIN}
    )
    assert r.status_code == 200 and r.json()["decisions"][0]["servable"] is True


def test_a_client_cannot_claim_a_role_its_key_does_not_hold(keyed):
    r = keyed.route(
        {"role": "admin", "message": "restart the indexing service"},
        headers={"Authorization": f"Bearer {KEY_VIEWER}"},
    )
    assert r.status_code == 403 and error(r)["code"] == "role_not_held"
    time.sleep(0.1)
    log = keyed.output()
    assert "key reader asked for role 'admin'" in log
    assert KEY_VIEWER not in log and KEY_ADMIN not in log


def test_bad_key_file_fails_at_start(tmp_path):
    kf = tmp_path / "keys.yaml"
    kf.write_text("keys:\n  - {id: a, key: plaintext, roles: [viewer]}\n")
    r = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "serve", "--key-file", str(kf), "--port", str(free_port())],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "plain keys are not accepted" in r.stderr


# ---------------------------------------------------------------------------------- metrics
def test_metrics_contents(server):
    server.route({"role": "admin", "message": "restart the indexing service"})
    server.route({"role": "viewer", "message": "!!!"})
    server.client.post("/v1/route", content=b"{", headers={"content-type": "application/json"})
    m = server.client.get("/metrics")
    assert m.status_code == 200 and m.headers["content-type"].startswith("text/plain")
    text = m.text
    model = f'model="{server.client.get("/healthz").json()["model_id"]}"'
    for needle in [
        f'intent_router_requests_total{{{model},path="/v1/route",status="200"}}',
        f'intent_router_requests_total{{{model},path="/v1/route",status="400"}}',
        f'intent_router_request_seconds_bucket{{le="0.005",{model},path="/v1/route"}}',
        f'intent_router_decisions_total{{{model},reason_code="confident",source="classifier"}}',
        f'intent_router_decisions_total{{{model},reason_code="low_signal",source="guardrail"}}',
        f'intent_router_stage_seconds_bucket{{le="0.01",{model},stage="inference"}}',
        f'intent_router_stage_seconds_count{{{model},stage="tokenize"}}',
        f'intent_router_stage_seconds_count{{{model},stage="route"}}',
        f"intent_router_messages_total{{{model}}}",
        f"intent_router_batch_messages_count{{{model}}}",
        f"intent_router_model{{{model}}} 1.0",
        'intent_router_verifier_breaker_state{state="none"} 1.0',
        "intent_router_requests_in_flight",
        "intent_router_ready 1.0",
    ]:
        assert needle in text, needle


def test_openapi_has_the_decision_schema(server):
    doc = server.client.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]
    assert "Decision" in schemas and "reason_code" in schemas["Decision"]["properties"]
    post = doc["paths"]["/v1/route"]["post"]
    assert {"413", "422", "403"} <= set(post["responses"])
    assert "messages" in post["requestBody"]["content"]["application/json"]["schema"]["properties"]


def test_base_install_does_not_import_fastapi():
    code = "import sys, router; from router import Router, Decision; print('fastapi' in sys.modules, 'ray' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    assert out.split() == ["False", "False"]
