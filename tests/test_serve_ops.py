"""Operating `intent-router serve`: worker processes, hot reload (admin endpoint and SIGHUP), admin keys,
the decision log and the model label of the metrics. Real server processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import FAST, SHIPPED
from tests.test_serve import ROOT, Server, error

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


def test_the_golden_set_is_checked_before_serving_and_fits_the_models_labels(tmp_path):
    from router.serve.golden import PACKAGED, golden_for, load_golden
    from router.serve.settings import ServeSettings

    packaged = load_golden(PACKAGED)
    assert len(packaged.texts) == 40 and set(packaged.labels) == {
        "SEARCH",
        "REASONING",
        "PLANNING",
        "MEMORY",
        "ACTION",
        "OUT_OF_SCOPE",
    }
    assert golden_for(None, ["BILLING", "SHIPPING", "OUT_OF_SCOPE"]) is None  # other intents: not checked
    bad = tmp_path / "golden.jsonl"
    bad.write_text('{"text": "refund my order", "label": "BILLING"}\n{"text": ""}\n')
    with pytest.raises(ValueError, match=r"golden.jsonl:2: a golden row is a JSON object"):
        ServeSettings(golden=bad)
    bad.write_text('{"text": "refund my order", "label": "BILLING"}\n')
    with pytest.raises(ValueError, match=r"labels \['BILLING'\] are not the model's"):
        golden_for(bad, ["SEARCH", "ACTION"])
    with pytest.raises(ValueError, match="golden_min_accuracy must be in"):
        ServeSettings(golden_min_accuracy=1.5)


# ---------------------------------------------------------------------------- no server needed
def test_the_turn_memory_finds_a_message_by_the_decision_sent_back_and_forgets_the_oldest():
    from router import Router
    from router.decision import Decision
    from router.serve.turns import TurnMemory

    r = Router.load(SHIPPED)
    texts = ["restart the billing worker", "find the travel policy", "plan the offsite"]
    decisions = r.route_batch(texts, "admin")
    memory = TurnMemory(size=2)
    memory.remember([d.model_dump_json().encode() for d in decisions], texts)
    echoed = [
        Decision.model_validate(json.loads(d.model_dump_json())) for d in decisions
    ]  # as a client sends
    assert [memory.recall(d) for d in echoed] == [None, *texts[1:]]  # the oldest is forgotten
    changed = echoed[2].model_copy(update={"confidence": 0.5})
    assert memory.recall(changed) is None  # a Decision altered on the way is not matched


def test_the_model_id_carries_a_digest_that_a_rewritten_manifest_cannot_keep(tmp_path):
    from router.manifest import load_manifest

    shipped = load_manifest(FAST)
    copy = shutil.copytree(FAST, tmp_path / "copy")
    assert load_manifest(copy).model_id == shipped.model_id  # the same files: the same id
    scrambled = load_manifest(scrambled_copy(FAST, tmp_path / "scrambled"))
    assert scrambled.name == shipped.name and scrambled.created_at == shipped.created_at
    assert scrambled.model_id != shipped.model_id
    assert re.fullmatch(r"intent-minilm-fast@\S+\+[0-9a-f]{12}", shipped.model_id)


def test_key_file_admin_flag(tmp_path):
    from router.serve.auth import KeyFileError, KeyStore, hash_key

    kf = key_file(tmp_path)
    keys = KeyStore.load(kf)
    admin, reader = keys.authenticate(KEY_ADMIN), keys.authenticate(KEY_READER)
    assert admin.admin and admin.roles == frozenset() and not reader.admin
    for entry, message in [
        ("{id: a, sha256: %s, admin: yes-please}", "'admin' must be true or false"),
        ("{id: a, sha256: %s}", "only an admin key may hold none"),
        ("{id: a, sha256: %s, roles: [], admin: false}", "only an admin key may hold none"),
    ]:
        kf.write_text("keys:\n  - " + entry % hash_key("k") + "\n")
        with pytest.raises(KeyFileError, match=re.escape(message)):
            KeyStore.load(kf)


def test_settings_refuse_bad_operations_options(tmp_path):
    from router.serve.settings import ServeSettings

    with pytest.raises(ValueError, match="workers must be >= 1"):
        ServeSettings(workers=0)
    with pytest.raises(ValueError, match="jsonl or parquet"):
        ServeSettings(decision_log=tmp_path, decision_log_format="csv")
    with pytest.raises(ValueError, match="needs --decision-log"):
        ServeSettings(decision_log_redact="x:y")


def test_decision_log_redaction_hook_is_named_module_function(tmp_path):
    import os.path

    from router.serve.settings import ServeSettings
    from router.serve.state import open_decision_log, redaction_hook

    assert redaction_hook("os.path:basename") is os.path.basename
    for spec, message in [
        ("nocolon", "expected module:function"),
        ("os.path:nope", "nope"),
        ("os:sep", "not callable"),
    ]:
        with pytest.raises(ValueError, match=message):
            redaction_hook(spec)
    dlog = open_decision_log(
        ServeSettings(decision_log=tmp_path / "d", decision_log_redact="os.path:basename")
    )
    assert dlog.redact is os.path.basename and (tmp_path / "d").is_dir()
    dlog.close()


def test_serve_refuses_a_bad_decision_log_format_with_one_line():
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "serve",
            "--decision-log",
            "x",
            "--decision-log-format",
            "csv",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "jsonl or parquet, got 'csv'" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


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


def test_a_redaction_hook_in_the_working_directory_imports_without_pythonpath(tmp_path, monkeypatch):
    """`serve --decision-log-redact mymod:fn` run from the folder that holds mymod.py, as a user writes it."""
    from router.serve.state import redaction_hook

    (tmp_path / "myredact_hook.py").write_text("def scrub(text):\n    return text.replace('4111', '****')\n")
    monkeypatch.chdir(tmp_path)
    before = list(sys.path)
    fn = redaction_hook("myredact_hook:scrub")
    assert fn("card 4111") == "card ****" and sys.path == before
