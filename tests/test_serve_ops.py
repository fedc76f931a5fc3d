"""Operating `intent-router serve` in one worker: the admin endpoint's keys and hot reload (a broken or
scrambled model refused, a swap that drops no request), the metrics' model label and the decision log;
and the helpers the other serve tests share. Real server processes on 127.0.0.1."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import FAST, SHIPPED
from tests.test_serve import Server, error

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

KEY_READER = "ir_ops-reader-key-0123456789abcdef"
KEY_ADMIN = "ir_ops-admin-key-0123456789abcdef"


def key_file(tmp: Path) -> Path:
    from router.serve.auth import hash_key

    kf = tmp / "keys.yaml"
    kf.write_text(
        "keys:\n"
        f"  - {{id: reader, sha256: {hash_key(KEY_READER)}, roles: [viewer, admin]}}\n"
        f"  - {{id: deployer, sha256: {hash_key(KEY_ADMIN)}, admin: true}}\n"
    )
    return kf


def model_id(model_dir: Path) -> str:
    from router.manifest import load_manifest

    m = load_manifest(model_dir)
    return f"{m.model_id}/{m.export.default_variant}"


def broken_copy(src: Path, dst: Path) -> Path:
    """A copy of a model whose int8 graph has one byte changed."""
    shutil.copytree(src, dst)
    graph = dst / "model.int8.onnx"
    data = bytearray(graph.read_bytes())
    data[len(data) // 2] ^= 0xFF
    graph.write_bytes(bytes(data))
    return dst


def scrambled_copy(src: Path, dst: Path) -> Path:
    """A copy of a model whose default graph has its large weights shuffled, with the manifest's sha256
    written again: every file matches the manifest, and the model routes at random."""
    import json

    import numpy as np
    import onnx
    from onnx import numpy_helper

    from router.manifest import file_entry

    shutil.copytree(src, dst)
    manifest = json.loads((dst / "manifest.json").read_text())
    variant = manifest["export"]["variants"][manifest["export"]["default_variant"]]
    graph = onnx.load(str(dst / variant["file"]["path"]))
    rng = np.random.default_rng(0)
    for init in graph.graph.initializer:
        a = numpy_helper.to_array(init)
        if a.size > 10_000:
            init.CopyFrom(numpy_helper.from_array(rng.permutation(a.ravel()).reshape(a.shape), init.name))
    onnx.save(graph, str(dst / variant["file"]["path"]))
    variant["file"] = file_entry(dst, variant["file"]["path"]).model_dump(mode="json")
    (dst / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return dst


def reload(s: Server, body: dict | None = None, key: str | None = KEY_ADMIN) -> httpx.Response:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return s.client.post("/admin/reload", json=body, headers=headers, timeout=60)


def wait_for(check, timeout: float = 30, what: str = "condition") -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not met after {timeout} s")


# --------------------------------------------------------------------------- one worker, reload
@pytest.fixture(scope="module")
def ops(tmp_path_factory):
    """One worker with a key file and a decision log, starting on the shipped model."""
    tmp = tmp_path_factory.mktemp("ops")
    s = Server("--key-file", str(key_file(tmp)), "--decision-log", str(tmp / "decisions"), tmp=tmp)
    s.tmp = tmp
    s.routed = 0  # messages answered 200 by /v1/route: the decision log must hold as many records
    yield s
    s.stop()


def route(s: Server, body: dict, client: httpx.Client | None = None) -> httpx.Response:
    r = (client or s.client).post("/v1/route", json=body, headers={"X-API-Key": KEY_READER})
    if r.status_code == 200:
        s.routed += len(r.json()["decisions"])
    return r


@pytest.mark.slow
def test_admin_endpoint_needs_an_admin_key(ops):
    r = reload(ops, key=None)
    assert r.status_code == 401 and error(r)["code"] == "missing_key"
    r = reload(ops, key="ir_unknown")
    assert r.status_code == 401 and error(r)["code"] == "bad_key"
    r = reload(ops, key=KEY_READER)
    assert r.status_code == 403 and error(r)["code"] == "not_admin"
    assert "key reader called an admin endpoint" in ops.output()
    r = reload(ops, {"model": str(FAST), "extra": 1})
    assert r.status_code == 422 and error(r)["code"] == "invalid_request"
    r = ops.client.post("/admin/reload", content=b"{", headers={"X-API-Key": KEY_ADMIN})
    assert r.status_code == 400 and error(r)["code"] == "invalid_json"
    # an admin key routes for no role: it holds none
    r = ops.route({"role": "viewer", "message": "hi there"}, headers={"X-API-Key": KEY_ADMIN})
    assert r.status_code == 403 and error(r)["code"] == "role_not_held"


@pytest.mark.slow
def test_a_broken_model_is_refused_and_the_old_one_keeps_serving(ops, tmp_path):
    before = ops.client.get("/healthz").json()["model_id"]
    r = reload(ops, {"model": str(broken_copy(FAST, tmp_path / "broken"))})
    e = error(r)
    assert r.status_code == 422 and e["code"] == "reload_failed", r.text
    assert "does not match the manifest" in e["message"] and f"still serving {before}" in e["message"]
    assert e["model_id"] == before == ops.client.get("/readyz").json()["model_id"]
    r = reload(ops, {"model": str(tmp_path / "missing")})
    assert r.status_code == 422 and "model directory not found" in error(r)["message"]
    r = route(ops, {"role": "viewer", "message": "where is the travel policy"})
    assert r.status_code == 200 and r.json()["decisions"][0]["model_id"] == before
    assert "reload failed (admin request)" in ops.output()


@pytest.mark.slow
def test_an_admin_reload_with_a_compare_report_that_does_not_load_is_refused(ops, tmp_path):
    current = ops.client.get("/healthz").json()["model_id"]
    other = FAST if current == model_id(SHIPPED) else SHIPPED
    r = reload(ops, {"model": str(other), "compare_report": str(tmp_path / "compare.json")})
    e = error(r)
    assert r.status_code == 422 and e["code"] == "reload_failed", r.text
    assert "compare report" in e["message"] and "no such file" in e["message"]
    assert ops.client.get("/healthz").json()["model_id"] == current


@pytest.mark.slow
def test_a_model_with_scrambled_weights_and_a_matching_manifest_is_refused_by_the_golden_set(ops, tmp_path):
    """Every file matches the manifest, so only the golden set can tell: the reload is refused with its
    figures, the old model keeps serving, and no request fails meanwhile."""
    before = ops.client.get("/healthz").json()["model_id"]
    scrambled = scrambled_copy(FAST, tmp_path / "scrambled")
    statuses: list[int] = []
    stop = threading.Event()

    def traffic() -> None:
        with httpx.Client(base_url=ops.url, timeout=10) as client:
            while not stop.is_set():
                statuses.append(
                    route(
                        ops, {"role": "viewer", "message": "where is the travel policy"}, client
                    ).status_code
                )

    t = threading.Thread(target=traffic)
    t.start()
    try:
        r = reload(ops, {"model": str(scrambled)})
    finally:
        stop.set()
        t.join()
    e = error(r)
    assert r.status_code == 422 and e["code"] == "reload_failed", r.text
    assert (
        "golden set" in e["message"]
        and "read right" in e["message"]
        and "below the floor 0.9" in e["message"]
    )
    assert f"still serving {before}" in e["message"]
    assert statuses and set(statuses) == {200}
    assert ops.client.get("/readyz").json()["model_id"] == before


@pytest.mark.slow
def test_admin_reload_swaps_the_model_without_dropping_a_request(ops):
    old, new = model_id(SHIPPED), model_id(FAST)
    assert ops.client.get("/healthz").json()["model_id"] == old
    stop = threading.Event()
    seen: list[list[tuple[int, str | None]]] = [[] for _ in range(3)]
    ready: list[int] = []

    def fire(k: int) -> None:
        with httpx.Client(base_url=ops.url, timeout=30) as c:
            while not stop.is_set():
                r = route(ops, {"role": "admin", "message": "restart the indexing service"}, c)
                seen[k].append(
                    (r.status_code, r.json()["decisions"][0]["model_id"] if r.is_success else r.text)
                )

    def poll_ready() -> None:
        with httpx.Client(base_url=ops.url, timeout=30) as c:
            while not stop.is_set():
                ready.append(c.get("/readyz").status_code)
                time.sleep(0.02)

    threads = [threading.Thread(target=fire, args=(k,)) for k in range(3)]
    threads.append(threading.Thread(target=poll_ready))
    for t in threads:
        t.start()
    try:
        time.sleep(0.5)
        r = reload(ops, {"model": str(FAST)})
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "reloaded" and body["model_id"] == new and body["previous_model_id"] == old
    assert body["model"] == str(FAST.resolve())
    for answers in seen:
        assert answers and all(status == 200 for status, _ in answers), answers
        models = [m for _, m in answers]
        switch = models.index(new)  # old until the swap, new from then on
        assert switch > 0 and set(models[:switch]) == {old} and set(models[switch:]) == {new}
    assert ready and set(ready) == {200}
    doc = ops.client.get("/readyz").json()
    assert doc["model_id"] == new and ops.client.get("/healthz").json()["model_id"] == new


@pytest.mark.slow
def test_metrics_carry_the_model_label(ops):
    current = ops.client.get("/healthz").json()["model_id"]
    assert route(ops, {"role": "viewer", "message": "where is the travel policy"}).status_code == 200
    reload(ops, key=KEY_READER)  # refused: counted under the model serving
    text = ops.client.get("/metrics").text
    m = f'model="{current}"'
    for needle in [
        f'intent_router_requests_total{{{m},path="/v1/route",status="200"}}',
        f'intent_router_request_seconds_count{{{m},path="/v1/route"}}',
        f'intent_router_decisions_total{{{m},reason_code="confident",source="classifier"}}',
        f'intent_router_stage_seconds_count{{{m},stage="inference"}}',
        f"intent_router_messages_total{{{m}}}",
        f"intent_router_batch_messages_count{{{m}}}",
        f'intent_router_auth_failures_total{{{m},reason="not_admin"}}',
        f"intent_router_model{{{m}}} 1.0",
    ]:
        assert needle in text, needle
    if current == model_id(FAST):  # after the reload test: both models, each under its own label
        old = f'model="{model_id(SHIPPED)}"'
        assert f'intent_router_requests_total{{{old},path="/v1/route",status="200"}}' in text
        assert f"intent_router_model{{{old}}} 0.0" in text
        assert f'intent_router_reloads_total{{{m},outcome="ok"}}' in text


@pytest.mark.slow
def test_decision_log_has_one_record_per_routed_message(ops):
    from router.decision_log import read_log

    r = route(
        ops,
        {
            "role": "admin",
            "message": "the same for the EU cluster",
            "previous": {"message": "restart the indexing service in us-east"},
        },
    )
    assert r.status_code == 200 and len(r.headers["X-Request-ID"]) == 32  # none sent: a new one
    first = route(ops, {"role": "admin", "message": "restart the billing worker in eu-west"})
    decision = first.json()["decisions"][0]
    r = route(ops, {"role": "admin", "message": "and in us-east too", "previous": {"decision": decision}})
    assert r.status_code == 200
    sent = {"X-API-Key": KEY_READER, "X-Request-ID": "checkout-7f3a:1"}
    body = {"role": "viewer", "messages": ["where is the travel policy", "???", "plan the offsite"]}
    r = ops.client.post("/v1/route", json=body, headers=sent)
    assert r.status_code == 200 and r.headers["X-Request-ID"] == "checkout-7f3a:1"
    ops.routed += 3
    records = list(read_log(ops.tmp / "decisions"))  # jsonl: each record is written as it is routed
    assert len(records) == ops.routed  # every routed message, and not the canary of a load or reload
    assert {r["model_id"] for r in records} <= {model_id(SHIPPED), model_id(FAST)}
    follow_up = [r for r in records if r["message"] == "the same for the EU cluster"]
    assert (
        len(follow_up) == 1 and follow_up[0]["previous_message"] == "restart the indexing service in us-east"
    )
    assert [r["message"] for r in records[-3:]] == ["where is the travel policy", "???", "plan the offsite"]
    (by_decision,) = [
        r for r in records if r["message"] == "and in us-east too"
    ]  # only the Decision was sent
    assert by_decision["previous_message"] == "restart the billing worker in eu-west"
    assert by_decision["previous_intents"] == decision["conversation_intents"]
    assert {(r["request_id"], r["key_id"]) for r in records[-3:]} == {("checkout-7f3a:1", "reader")}
    assert follow_up[0]["request_id"] not in {None, "checkout-7f3a:1"}
    assert all(KEY_READER not in json.dumps(r) for r in records)  # the key's id, never the key
