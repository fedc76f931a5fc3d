"""Issue 14, points 5-7: trickling and hanging endpoints, secrets, environment variables.

Uses the committed shipped model and real loopback servers; nothing trains.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time

import pytest

from router import Router
from router.classifier import Classification, Classifier
from router.verifier import LLMVerifier, VerifierError, VerifierSettings, VerifierUnavailable, redact_url
from tests.conftest import SHIPPED
from tests.openai_server import OpenAIServer

CLS = Classification(label="SEARCH", confidence=0.41, ranking=[("SEARCH", 0.41), ("REASONING", 0.33)])


@pytest.fixture(scope="module")
def shipped():
    return Router.load(SHIPPED)


# ------------------------------------------------------------------- 5. trickled headers and body
class TrickleServer:
    """Loopback server that accepts a connection, sends ``head`` at once, then ``payload`` one byte every
    ``every`` s."""

    def __init__(self, payload: bytes, every: float = 0.25, head: bytes = b"") -> None:
        self.payload, self.every, self.head = payload, every, head
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"

    def _serve(self) -> None:
        self.sock.settimeout(0.1)
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(self.head)
            for b in self.payload:
                if self.stop.wait(self.every):
                    break
                conn.sendall(bytes([b]))
        except OSError:
            pass
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()


BODY = json.dumps(
    {
        "choices": [
            {"finish_reason": "stop", "message": {"content": '{"intent": "SEARCH", "reason_code": "other"}'}}
        ]
    }
).encode()
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nX-Pad: " + b"a" * 200 + b"\r\n"
TRICKLE_TIMES: dict[str, float] = {}


@pytest.mark.parametrize(
    ("phase", "payload"),
    [
        ("headers", HEADERS + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY),
        ("body", None),
    ],
)
def test_trickling_server_cannot_hold_a_decision_past_the_deadline(phase, payload, shipped):
    if payload is None:  # headers at once, then the body a byte at a time
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
            len(BODY) + 400
        )
        server = TrickleServer(BODY + b" " * 400, every=0.25, head=head)
    else:
        server = TrickleServer(payload, every=0.25)
    deadline = 1.0
    v = LLMVerifier(VerifierSettings(base_url=server.base_url, timeout=0.8, deadline=deadline))
    router = Router(shipped.classifier, shipped.config, verifier=v, threshold=1.0)
    try:
        t0 = time.monotonic()
        d = router.route("which of the two vendor proposals is cheaper overall?", role="analyst")
        took = time.monotonic() - t0
    finally:
        v.close()
        server.close()
    TRICKLE_TIMES[phase] = took
    print(f"trickle {phase}: decision in {took:.3f} s against a {deadline} s deadline")
    assert took < deadline + 0.3, f"decision took {took:.2f} s against a {deadline} s deadline"
    assert d.reason_code.value == "verifier_failed" and d.source == "fallback"
    step = next(s for s in d.trace if s.stage == "verifier")
    assert step.status == "timeout"
    assert step.detail["attempts"][-1]["phase"] == phase
    assert ("response headers" if phase == "headers" else "response body") in step.detail["error"]


def test_deadline_holds_when_dns_hangs(monkeypatch):
    import router.verifier.transport as tr

    real = socket.getaddrinfo

    def slow(host, *a, **k):
        if host == "llm.invalid":
            time.sleep(3)
        return real(host, *a, **k)

    monkeypatch.setattr(tr.socket, "getaddrinfo", slow)
    v = LLMVerifier(VerifierSettings(base_url="http://llm.invalid/v1", timeout=0.5, deadline=0.6))
    t0 = time.monotonic()
    with pytest.raises(VerifierError) as ei:
        v.verify("find x", CLS)
    v.close()
    assert time.monotonic() - t0 < 0.9
    assert ei.value.status == "timeout" and ei.value.attempts[-1]["phase"] == "dns"


# ------------------------------------------------------------------------------------ 6. secrets
SECRET_URL = "http://user:PASS-123@127.0.0.1:{port}/v1?api-key=K-SECRET-9&api-version=2024-10-21"


def test_url_credentials_never_in_repr_trace_errors_or_logs(caplog):
    with OpenAIServer().start() as server:
        server.push(*[json.dumps({"x": 1})] * 2)  # invalid output twice: the trace keeps raw + errors
        url = SECRET_URL.format(port=server.port)
        settings = VerifierSettings(base_url=url, breaker_failures=1, breaker_cooldown=60)
        assert "PASS-123" not in repr(settings) and "K-SECRET-9" not in repr(settings)
        assert "api-version=2024-10-21" in redact_url(url)
        v = LLMVerifier(settings)
        caplog.set_level(logging.INFO)
        caplog.set_level(logging.INFO, logger="httpx")  # the CLI quiets httpx; earlier CLI tests may have run
        texts = []
        with pytest.raises(VerifierError) as ei:
            v.verify("find x", CLS)
        texts.append(str(ei.value) + json.dumps(ei.value.attempts))
        server.default.status = 500
        with pytest.raises(VerifierError) as ei:
            v.verify("find x", CLS)  # an endpoint failure opens the breaker (failures=1)
        with pytest.raises(VerifierUnavailable) as ei:
            v.verify("find x", CLS)
        texts.append(str(ei.value))
        v.close()
        # the server really got the credentials
        assert server.chat_requests()[0].path.endswith("api-key=K-SECRET-9&api-version=2024-10-21")
    texts.append(caplog.text)
    assert any("httpx" in r.name for r in caplog.records)
    for t in texts:
        assert "PASS-123" not in t and "K-SECRET-9" not in t, t


def test_key_is_not_sent_over_plain_http_to_another_host(monkeypatch):
    with pytest.raises(ValueError, match="clear text"):
        VerifierSettings(base_url="http://llm.example.com/v1", api_key="sk-1")
    with pytest.raises(ValueError, match="clear text"):
        VerifierSettings(base_url="http://u:p@llm.example.com/v1")
    ok = VerifierSettings(base_url="http://llm.example.com/v1", api_key="sk-1", allow_insecure_key=True)
    assert ok.api_key == "sk-1"
    assert VerifierSettings(base_url="https://llm.example.com/v1", api_key="sk-1").api_key == "sk-1"
    assert VerifierSettings(base_url="http://127.0.0.1:1/v1", api_key="sk-1").api_key == "sk-1"
    for k in ("INTENT_ROUTER_VERIFIER_API_KEY", "INTENT_ROUTER_VERIFIER_API_KEY_ENV"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai")
    assert VerifierSettings.from_env(base_url="http://127.0.0.1:8080/v1").api_key is None
    assert VerifierSettings.from_env(base_url="https://llm.example.com/v1").api_key is None
    assert VerifierSettings.from_env(base_url="https://api.openai.com/v1").api_key == "sk-openai"


# ------------------------------------------------------------------------- 7. environment variables
@pytest.mark.parametrize("value", ["100000", "abc", "-1", "1.5"])
def test_threads_env_is_bounded_and_named(monkeypatch, value):
    monkeypatch.setenv("INTENT_ROUTER_THREADS", value)
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="INTENT_ROUTER_THREADS"):
        Classifier(SHIPPED)
    assert time.monotonic() - t0 < 5


@pytest.mark.parametrize("var", ["INTENT_ROUTER_VERIFIER_TIMEOUT", "INTENT_ROUTER_VERIFIER_DEADLINE"])
@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0", "1e9", "soon"])
def test_verifier_seconds_env_is_finite_and_bounded(monkeypatch, var, value):
    monkeypatch.setenv("INTENT_ROUTER_VERIFIER_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv(var, value)
    with pytest.raises(ValueError, match=var):
        VerifierSettings.from_env()


def test_verifier_seconds_arguments_are_finite():
    for bad in (float("inf"), float("nan"), 0, -1):
        with pytest.raises(ValueError, match="timeout"):
            VerifierSettings(base_url="http://127.0.0.1:1/v1", timeout=bad)
    monkeypatch_threads = 2
    assert Classifier(SHIPPED, intra_op_threads=monkeypatch_threads).model_id
