"""The decision log: records, redaction, rotation, both formats, and what a killed writer leaves."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from router.decision_log import DecisionLog, config_hash, read_log, verifier_outcome
from tests.conftest import ROOT, SHIPPED


@pytest.fixture(scope="module")
def router():
    from router import Router

    return Router.load(SHIPPED)


def test_a_record_holds_the_message_the_decision_and_where_it_came_from(router, tmp_path):
    d = router.route("restart the billing worker in eu-west", role="admin")
    sha = config_hash(router.config)
    with DecisionLog(tmp_path) as log:
        log.write(d, "restart the billing worker in eu-west", sha, previous_message="hi")
    (record,) = list(read_log(tmp_path))
    assert record["message"] == "restart the billing worker in eu-west" and not record["redacted"]
    assert record["intent"] == d.intent and record["model_id"] == d.model_id == router.classifier.model_id
    assert record["config_sha"] == sha and len(sha) == 16
    assert record["decision"]["reason_code"] == d.reason_code.value
    assert record["latency_ms"] == d.latency.total_ms and record["verifier"] is None
    assert record["previous_message"] == "hi"


def test_the_redaction_hook_sees_every_message_before_it_is_written(router, tmp_path):
    d = router.route("email the Q3 numbers to maria@example.com", role="admin")
    with DecisionLog(tmp_path, redact=lambda t: t.replace("maria@example.com", "<email>")) as log:
        log.write(
            d, "email the Q3 numbers to maria@example.com", "x", previous_message="ask maria@example.com"
        )
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    assert b"maria@example.com" not in raw and b"<email>" in raw
    (record,) = list(read_log(tmp_path))
    assert record["message"] == "email the Q3 numbers to <email>" and record["redacted"]
    assert record["previous_message"] == "ask <email>"


def test_the_verifier_outcome_is_read_from_the_trace(router):
    d = router.route("and for next week?", role="admin")  # unsure: the verifier stage runs, absent here
    outcome = verifier_outcome(d)
    assert outcome is None or outcome["status"] == "absent"


def test_files_rotate_and_each_process_writes_its_own(router, tmp_path):
    d = router.route("find the travel policy", role="admin")
    with DecisionLog(tmp_path, max_bytes=4096) as log:
        for _ in range(20):
            log.write(d, "find the travel policy", "x")
    files = sorted(tmp_path.glob("decisions-*.jsonl"))
    assert len(files) > 1 and all(f"-{os.getpid()}-" in f.name for f in files)
    assert len(list(read_log(tmp_path))) == 20


def test_parquet_writes_whole_parts(router, tmp_path):
    pytest.importorskip("pyarrow")
    d = router.route("find the travel policy", role="admin")
    log = DecisionLog(tmp_path, fmt="parquet", batch_rows=3)
    for _ in range(7):
        log.write(d, "find the travel policy", "x")
    assert len(list(tmp_path.glob("*.parquet"))) == 2  # 6 written, 1 pending
    log.close()
    records = list(read_log(tmp_path))
    assert len(records) == 7 and records[0]["decision"]["intent"] == d.intent


def test_a_parquet_part_keeps_keys_its_first_row_lacks(router, tmp_path):
    pytest.importorskip("pyarrow")
    d = router.route("and the same for staging", role="admin")
    with DecisionLog(tmp_path, fmt="parquet", batch_rows=2) as log:
        log.write(d, "restart the indexing service", "x")
        log.write(
            d, "and the same for staging", "x", "restart the indexing service", d, {"request_id": "r-2"}
        )
    first, follow_up = list(read_log(tmp_path))
    assert first["previous_message"] is None and first["request_id"] is None
    assert follow_up["previous_message"] == "restart the indexing service"
    assert follow_up["request_id"] == "r-2" and follow_up["previous_intents"] == list(d.conversation_intents)


def test_the_callers_fields_are_kept_beside_the_records_own(router, tmp_path):
    d = router.route("find the travel policy", role="admin")
    with DecisionLog(tmp_path) as log:
        log.write(
            d, "find the travel policy", "x", fields={"request_id": "abc", "key_id": "ci", "intent": "x"}
        )
    (record,) = list(read_log(tmp_path))
    assert (record["request_id"], record["key_id"]) == ("abc", "ci")
    assert record["intent"] == d.intent  # a field never overwrites what the record itself holds


def test_a_cut_last_line_is_skipped_and_a_broken_line_elsewhere_is_an_error(tmp_path):
    good = json.dumps({"message": "a", "decision": {}})
    (tmp_path / "decisions-1.jsonl").write_text(f'{good}\n{{"message": "b", "deci')
    assert [r["message"] for r in read_log(tmp_path)] == ["a"]
    (tmp_path / "decisions-1.jsonl").write_text(f"{good}\nnot json\n{good}\n")
    with pytest.raises(ValueError, match=r"decisions-1.jsonl:2"):
        list(read_log(tmp_path))


def test_bad_options_are_refused(tmp_path):
    with pytest.raises(ValueError, match="format"):
        DecisionLog(tmp_path, fmt="csv")
    with pytest.raises(ValueError, match="max_bytes"):
        DecisionLog(tmp_path, max_bytes=10)


@pytest.mark.slow
def test_a_killed_writer_loses_at_most_the_record_it_was_writing(tmp_path):
    """A real process routes and logs as fast as it can, reporting each record written; it is killed with
    SIGKILL mid-stream. Every record it reported is on disk and whole."""
    script = textwrap.dedent(
        f"""
        import sys
        from router import Router
        from router.decision_log import DecisionLog, config_hash
        router = Router.load({str(SHIPPED)!r})
        sha = config_hash(router.config)
        log = DecisionLog({str(tmp_path)!r}, max_bytes=64 * 1024)
        texts = ["find the travel policy", "restart the indexer", "thanks!", "plan the q3 offsite"]
        i = 0
        while True:
            t = texts[i % 4]
            log.write(router.route(t, role="admin"), t, sha)
            i += 1
            print(i, flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=ROOT)
    acknowledged, deadline = 0, time.monotonic() + 120
    while acknowledged < 300 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        acknowledged = int(line)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert acknowledged >= 300, "the writer did not get going"
    records = list(read_log(tmp_path))
    assert len(records) >= acknowledged  # nothing reported as written is lost
    assert all(r["decision"]["intent"] == r["intent"] for r in records)
    assert len(list(tmp_path.glob("decisions-*.jsonl"))) > 1  # it rotated on the way


def test_a_router_with_a_log_records_each_message_it_routes_once(tmp_path):
    from router import Router

    with DecisionLog(tmp_path) as log:
        router = Router.load(SHIPPED, decision_log=log)
        router.route_batch(["find the travel policy", "thanks!", ""], role="viewer")
        # the previous message of a continuation is routed too, but only the message asked about is logged
        d = router.route(
            "the same for the EU cluster", role="admin", context="restart the indexer in us-east"
        )
    records = list(read_log(tmp_path))
    assert [r["message"] for r in records] == [
        "find the travel policy",
        "thanks!",
        "",
        "the same for the EU cluster",
    ]
    assert records[-1]["previous_message"] == "restart the indexer in us-east"
    assert records[-1]["intent"] == d.intent and records[-1]["config_sha"] == router.config_sha
    assert {r["reason_code"] for r in records[:3]} == {"confident", "out_of_scope", "low_signal"}
