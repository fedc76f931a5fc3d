"""Issue 14: hostile input, files and endpoints. Each test names the point of the issue it covers.

Uses the committed shipped model (loads in ~0.1 s) and real loopback servers; nothing trains.
"""

from __future__ import annotations

import json
import logging
import shutil
import socket
import threading
import time
from pathlib import Path

import pytest

from router import Router
from router.classifier import Classification, Classifier
from router.config import RouterConfig
from router.manifest import ModelError
from router.rbac import check_config, effective_permissions, format_permissions
from router.routing import repair_text
from router.verifier import LLMVerifier, VerifierError, VerifierSettings, VerifierUnavailable, redact_url
from tests.conftest import ROOT, SHIPPED
from tests.openai_server import OpenAIServer

ADMIN_BATCH = ["restart the indexing service", "find the travel policy"]
CLS = Classification(label="SEARCH", confidence=0.41, ranking=[("SEARCH", 0.41), ("REASONING", 0.33)])


@pytest.fixture(scope="module")
def shipped():
    return Router.load(SHIPPED)


# ------------------------------------------------------------------ 1. one bad string, one Decision
def test_lone_surrogate_costs_only_itself(shipped):
    ds = shipped.route_batch([*ADMIN_BATCH, "a\ud800b"], role="admin")
    assert len(ds) == 3
    assert [d.intent.value for d in ds[:2]] == ["ACTION", "SEARCH"]
    assert ds[2].source != "guardrail" or ds[2].reason_code.value == "invalid_input"
    assert ds[2].trace[0].detail.get("repaired_surrogates") == 1
    # alone or in a batch, the same text gets the same treatment
    alone = shipped.route("a\ud800b", role="admin")
    assert (alone.source, alone.intent) == (ds[2].source, ds[2].intent)
    assert shipped.route("\ud800", role="admin").reason_code.value == "low_signal"


def test_repair_text_keeps_valid_pairs():
    assert repair_text("x\ud83d\ude00y") == ("x\U0001f600y", 2)
    assert repair_text("a\udc00") == ("a\ufffd", 1)
    assert repair_text("plain") == ("plain", 0)


def test_non_string_and_untokenizable_messages_get_their_own_decision(shipped, monkeypatch):
    ds = shipped.route_batch([ADMIN_BATCH[0], None, 42, ADMIN_BATCH[1]], role="admin")
    assert [d.reason_code.value for d in ds[1:3]] == ["invalid_input", "invalid_input"]
    assert ds[1].skills.all == [] and not ds[1].servable and ds[1].intent is None
    assert ds[0].intent.value == "ACTION" and ds[3].intent.value == "SEARCH"

    real = shipped.classifier.classify_batch

    def picky(texts):
        if any("poison" in t for t in texts):
            raise RuntimeError("tokenizer refused")
        return real(texts)

    monkeypatch.setattr(shipped.classifier, "classify_batch", picky)
    ds = shipped.route_batch([ADMIN_BATCH[0], "poison pill message", ADMIN_BATCH[1]], role="admin")
    assert [d.reason_code.value for d in ds] == ["confident", "invalid_input", "confident"]


# ------------------------------------------------------- 3. a model directory that disagrees with itself
def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "model"
    shutil.copytree(SHIPPED, dst)
    return dst


def _edit(model: Path, fn) -> None:
    p = model / "manifest.json"
    m = json.loads(p.read_text())
    fn(m)
    p.write_text(json.dumps(m, indent=2))


def _swap_action_memory(m):
    i, j = m["labels"].index("ACTION"), m["labels"].index("MEMORY")
    m["labels"][i], m["labels"][j] = m["labels"][j], m["labels"][i]


TAMPER = {
    "labels_reversed": lambda m: m["labels"].reverse(),
    "labels_swap_action_memory": _swap_action_memory,
    "max_seq_length_4": lambda m: m.update(max_seq_length=4),
    "max_seq_length_64": lambda m: m.update(max_seq_length=64),
    "temperature_changed": lambda m: m["calibration"].update(temperature=0.5),
    # the escaping paths point at real copies (right sha256) outside the model directory
    "path_parent": lambda m: m["export"]["variants"]["int8"]["file"].update(path="../outside.onnx"),
    "path_absolute": lambda m: m["export"]["tokenizer"].update(path=str(OUTSIDE_TOKENIZER[0])),
    "path_nested_escape": lambda m: m["export"]["tokenizer"].update(path="./../outside.json"),
    "labels_duplicated": lambda m: m.update(labels=["ACTION"] * 5),
}


OUTSIDE_TOKENIZER: list[Path] = []


@pytest.mark.parametrize("case", sorted(TAMPER))
def test_tampered_manifest_is_refused(tmp_path, case):
    model = _copy(tmp_path)
    shutil.copy(model / "model.int8.onnx", tmp_path / "outside.onnx")
    shutil.copy(model / "tokenizer.json", tmp_path / "outside.json")
    OUTSIDE_TOKENIZER[:] = [tmp_path / "outside.json"]
    _edit(model, TAMPER[case])
    with pytest.raises(ModelError):
        Router.load(model)


def test_symlink_out_of_the_model_directory_is_refused(tmp_path):
    model = _copy(tmp_path)
    outside = tmp_path / "elsewhere.json"
    shutil.move(model / "tokenizer.json", outside)
    (model / "tokenizer.json").symlink_to(outside)
    with pytest.raises(ModelError, match="outside the model directory"):
        Router.load(model)


def test_duplicate_keys_in_the_manifest_are_refused(tmp_path):
    model = _copy(tmp_path)
    p = model / "manifest.json"
    text = p.read_text()
    p.write_text(text.replace('"labels": [', '"labels": ["SEARCH", "ACTION"],\n  "labels": [', 1))
    with pytest.raises(ModelError, match="duplicate key 'labels'"):
        Router.load(model)


def test_unstamped_graph_loads_with_a_warning(tmp_path):
    import onnx

    from router.manifest import file_entry, load_manifest

    model = _copy(tmp_path)
    g = onnx.load(str(model / "model.int8.onnx"), load_external_data=False)
    del g.metadata_props[:]
    onnx.save(g, str(model / "model.int8.onnx"))
    m = load_manifest(model)
    m.export.variants["int8"].file = file_entry(model, "model.int8.onnx")
    m.save(model)
    with pytest.warns(UserWarning, match="no intent_router metadata"):
        c = Classifier(model)
    assert c.graph_metadata is None


def test_shipped_graph_carries_its_metadata():
    c = Classifier(SHIPPED)
    assert c.graph_metadata["labels"] == c.labels and c.graph_metadata["max_seq_length"] == 128


# ------------------------------------------------------------------------ 4. strict config files
DEFAULT_YAML = (ROOT / "router" / "config" / "default.yaml").read_text()


def test_duplicate_skill_key_is_an_error_with_file_and_line(tmp_path):
    text = DEFAULT_YAML.replace("skills:\n", "skills:\n  action:\n    permissions: []\n", 1)
    assert text != DEFAULT_YAML
    p = tmp_path / "dup.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"dup\.yaml:\d+: duplicate key 'action'"):
        RouterConfig.load(p)


def test_duplicate_role_key_is_an_error(tmp_path):
    text = DEFAULT_YAML.replace(
        "roles:\n", "roles:\n  viewer:\n    skills: ['*']\n    permissions: ['*']\n", 1
    )
    p = tmp_path / "dup-role.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"dup-role\.yaml:\d+: duplicate key 'viewer'"):
        RouterConfig.load(p)


@pytest.mark.parametrize("value", ["'no'", "'yes'", "0", "1", "'false'"])
def test_non_boolean_boolean_is_an_error(tmp_path, value):
    text = DEFAULT_YAML.replace("requires_confirmation: true", f"requires_confirmation: {value}", 1)
    assert text != DEFAULT_YAML
    p = tmp_path / "bool.yaml"
    p.write_text(text)
    with pytest.raises(ValueError, match=r"bool\.yaml:\d+: skills\.action\.requires_confirmation"):
        RouterConfig.load(p)


def test_unknown_field_names_file_and_line(tmp_path):
    lines = DEFAULT_YAML.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("roles:"))
    p = tmp_path / "extra.yaml"
    p.write_text("\n".join([*lines[: at + 1], "  viewer2:", "    skils: [retrieval]", *lines[at + 1 :]]))
    with pytest.raises(ValueError, match=rf"extra\.yaml:{at + 3}: roles\.viewer2\.skils: unknown field"):
        RouterConfig.load(p)


def test_config_check_table():
    report = check_config(ROOT / "router" / "config" / "default.yaml")
    table = report["roles"]
    assert table == effective_permissions(RouterConfig.load())
    assert table["admin"]["action"]["granted"] and table["admin"]["action"]["requires_confirmation"]
    assert not table["viewer"]["action"]["granted"] and "viewer" in table["viewer"]["action"]["reason"]
    text = format_permissions(report)
    assert "role viewer:" in text and "- action:" in text


# ------------------------------------------------------------------- 5. trickled headers and body
class TrickleServer:
    """Loopback server that accepts a connection, then sends ``payload`` one byte every ``every`` s."""

    def __init__(self, payload: bytes, every: float = 0.25) -> None:
        self.payload, self.every = payload, every
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
        server = TrickleServer(b"", every=0.25)
        server.payload = b""
        head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
            len(BODY) + 400
        )
        server._trickle = _headers_then_trickle(server, head, BODY + b" " * 400)
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


def _headers_then_trickle(server: TrickleServer, head: bytes, body: bytes):
    def run(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(head)
            for b in body:
                if server.stop.wait(server.every):
                    break
                conn.sendall(bytes([b]))
        except OSError:
            pass
        finally:
            conn.close()

    return run


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
