"""`intent-router score`: local streaming scoring, formats, resume after a kill, and Ray Data."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from eval.metrics.scored_logs import decisions_metrics  # noqa: E402
from router.score.options import ScoreError, ScoreOptions, model_labels  # noqa: E402
from router.score.output import parts_dir  # noqa: E402
from router.score.run import score_file  # noqa: E402
from tests.conftest import SHIPPED as SHIPPED_DIR  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = str(SHIPPED_DIR)  # as committed (tests/shipped_models.py)


def corpus(n: int) -> list[dict]:
    rows = [
        json.loads(line) for line in (ROOT / "data" / "test.jsonl").read_text().splitlines() if line.strip()
    ]
    out = []
    for i in range(n):
        r = rows[i % len(rows)]
        out.append(
            {"id": f"m{i}", "text": r["text"] if i < len(rows) else f"{r['text']} #{i}", "label": r["label"]}
        )
    return out


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def opts(**kw) -> ScoreOptions:
    return ScoreOptions(model_dir=SHIPPED, **kw)


def test_jsonl_with_labels_to_parquet(tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", corpus(300))
    out = tmp_path / "out.parquet"
    s = score_file(inp, out, opts(with_labels=True, id_column="id", chunk_rows=128), progress=False)
    assert s["rows"] == 300 and s["scored_now"] == 300 and not parts_dir(out).exists()
    t = pq.read_table(out)
    assert t.column("row").to_pylist() == list(range(300))
    assert t.column("id").to_pylist() == [f"m{i}" for i in range(300)]
    assert set(t.column("source").to_pylist()) <= {"classifier", "fallback", "guardrail"}
    assert "metrics" not in s  # eval measures the decisions file
    m = decisions_metrics(out, model_labels(SHIPPED))
    # the classifier's top labels: five intents, OUT_OF_SCOPE, and CONTINUATION where it reads a row as one
    assert m["n"] == 300 and m["accuracy"] > 0.9 and len(m["confusion_matrix"]["matrix"]) in (6, 7)
    assert 0.9 < m["decided_share"] <= 1 and m["decided_accuracy"] > 0.9


def test_parquet_round_trip_and_jsonl_output_agree(tmp_path):
    rows = corpus(200)
    inp = tmp_path / "in.parquet"
    # several row groups, so reading by row group is exercised
    pq.write_table(pa.Table.from_pylist(rows), inp, row_group_size=64)
    a, b = tmp_path / "a.parquet", tmp_path / "b.jsonl"
    score_file(inp, a, opts(id_column="id", keep_text=True, role="admin"), progress=False)
    score_file(inp, b, opts(id_column="id", keep_text=True, role="admin"), progress=False)
    ta = pq.read_table(a)
    jb = [json.loads(line) for line in b.read_text().splitlines()]
    assert ta.num_rows == len(jb) == 200
    assert ta.column("text").to_pylist() == [r["text"] for r in rows]
    la = ta.to_pylist()
    for x, y in zip(la, jb, strict=True):
        assert (
            x["row"] == y["row"]
            and x["intent"] == y["intent"]
            and x["skills_required"] == y["skills_required"]
        )
        assert x["confidence"] == pytest.approx(y["confidence"])
    # score output can be scored again (Parquet in, Parquet out)
    c = tmp_path / "c.parquet"
    score_file(a, c, opts(text_column="text", id_column="id"), progress=False)
    assert pq.read_table(c).column("intent").to_pylist() == ta.column("intent").to_pylist()


def test_csv_input_and_denied_skills(tmp_path):
    inp = tmp_path / "in.csv"
    inp.write_text(
        'text,label\n"restart the indexing service, now",ACTION\n"where is the travel policy",SEARCH\n'
    )
    out = tmp_path / "out.jsonl"
    score_file(inp, out, opts(role="viewer", with_labels=True), progress=False)
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["intent"] for r in recs] == ["ACTION", "SEARCH"]
    assert recs[0]["denied_required"] == ["action"] and recs[0]["servable"] is False


def test_invalid_rows_stop_the_run_or_are_marked(tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"text": "where is the travel policy"}\n\n{"text": null}\nnot json\n{"text": ""}\n')
    with pytest.raises(ScoreError, match="line 3: missing 'text'"):
        score_file(inp, tmp_path / "o.parquet", opts(), progress=False)
    s = score_file(inp, tmp_path / "o.parquet", opts(skip_invalid=True), progress=False, overwrite=True)
    t = pq.read_table(tmp_path / "o.parquet").to_pylist()
    assert s["rows"] == 4 and [r["row"] for r in t] == [0, 1, 2, 3]
    assert t[1]["error"] == "missing 'text'" and t[1]["intent"] is None
    assert t[2]["error"].startswith("invalid JSON")
    assert t[3]["source"] == "guardrail" and t[3]["error"] is None  # an empty message is routed


def test_existing_output_and_changed_options_are_refused(tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", corpus(50))
    out = tmp_path / "out.parquet"
    score_file(inp, out, opts(), progress=False)
    with pytest.raises(ScoreError, match="exists"):
        score_file(inp, out, opts(), progress=False)
    # a partial run, then a different role: refused, since its parts hold viewer decisions
    out2 = tmp_path / "out2.parquet"
    score_file(inp, out2, opts(chunk_rows=16), progress=False, max_rows=20)
    assert parts_dir(out2).exists()
    with pytest.raises(ScoreError, match="different input or options"):
        score_file(inp, out2, opts(role="admin", chunk_rows=16), progress=False)
    s = score_file(inp, out2, opts(chunk_rows=16), progress=False)
    assert s["resumed_from"] == 20 and s["rows"] == 50


@pytest.mark.slow
def test_resume_after_a_kill(tmp_path):
    n = 2000
    rows = corpus(n)
    inp = write_jsonl(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.parquet"
    pdir = parts_dir(out)
    cmd = [sys.executable, str(ROOT / "cli.py"), "score", str(inp), "--out", str(out), "--model", SHIPPED]
    cmd += ["--keep-text", "--id-column", "id", "--quiet", "--chunk-rows", "200"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        end = time.monotonic() + 120
        while time.monotonic() < end and not (
            pdir.exists() and any(p.suffix == ".parquet" for p in pdir.iterdir())
        ):
            time.sleep(0.05)
        time.sleep(0.3)  # into the next chunk
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert not out.exists()
    done_before = sum(pq.read_metadata(p).num_rows for p in pdir.glob("part-*.parquet"))
    assert 0 < done_before < n
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    assert summary["resumed_from"] == done_before and summary["scored_now"] == n - done_before
    t = pq.read_table(out)
    assert t.column("row").to_pylist() == list(range(n))  # none lost, none twice, in order
    assert t.column("id").to_pylist() == [r["id"] for r in rows]
    assert t.column("text").to_pylist() == [r["text"] for r in rows]
    assert t.column("intent").null_count == 0 or set(t.column("source").to_pylist()) >= {"classifier"}
    assert not pdir.exists()


@pytest.mark.slow
def test_ray_local_matches_local(tmp_path):
    pytest.importorskip("ray")
    from router.score.ray_data import score_file_ray

    inp = write_jsonl(tmp_path / "in.jsonl", corpus(600))
    local, ray_out = tmp_path / "local.parquet", tmp_path / "ray.parquet"
    score_file(inp, local, opts(with_labels=True, id_column="id"), progress=False)
    s = score_file_ray(
        inp, ray_out, opts(with_labels=True, id_column="id"), workers=2, window_rows=250, progress=False
    )
    assert s["rows"] == 600 and s["ray"]["workers"] == 2
    a, b = pq.read_table(local), pq.read_table(ray_out)
    assert b.column("row").to_pylist() == list(range(600))
    assert a.column("intent").to_pylist() == b.column("intent").to_pylist()
    assert a.column("id").to_pylist() == b.column("id").to_pylist()
    assert decisions_metrics(ray_out, model_labels(SHIPPED))["accuracy"] > 0.9


def test_cli_score_prints_a_summary(tmp_path):
    inp = write_jsonl(tmp_path / "in.jsonl", corpus(40))
    out = tmp_path / "out.jsonl"
    cmd = [
        sys.executable,
        str(ROOT / "cli.py"),
        "score",
        str(inp),
        "--out",
        str(out),
        "--model",
        SHIPPED,
        "-q",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.strip().splitlines()[-1])["rows"] == 40
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "exists" in r.stderr


def test_cli_score_with_labels_adds_the_metrics(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    inp = write_jsonl(tmp_path / "in.jsonl", corpus(40))
    out = tmp_path / "out.jsonl"
    args = ["score", str(inp), "--out", str(out), "--model", SHIPPED, "--with-labels", "-q"]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    summary = json.loads(r.output.strip().splitlines()[-1])
    assert summary["rows"] == 40 and summary["metrics"]["n"] == 40 and summary["metrics"]["accuracy"] > 0.9


def test_import_router_score_needs_no_extra():
    code = (
        "import sys, router.score\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'pyarrow', 'ray', 'eval', 'training'}))"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"


def test_score_with_labels_reports_what_eval_reports(tmp_path):
    """The test split scored with --with-labels: the same accuracy and macro-F1 as `intent-router eval`,
    out-of-scope and continuation rows included (the classifier's top label, not its first intent)."""
    from typer.testing import CliRunner

    from cli import app

    test = ROOT / "data" / "test.jsonl"
    args = [
        "score",
        str(test),
        "--out",
        str(tmp_path / "out.jsonl"),
        "--model",
        SHIPPED,
        "--with-labels",
        "-q",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    scored = json.loads(r.output.strip().splitlines()[-1])["metrics"]
    args = [
        "eval",
        "--model",
        SHIPPED,
        "--data",
        str(test),
        "--out",
        str(tmp_path / "eval"),
        "--max-latency-samples",
        "0",
    ]
    assert CliRunner().invoke(app, args).exit_code == 0
    evaluated = json.loads((tmp_path / "eval" / "eval.json").read_text())["classification"]
    assert scored["accuracy"] == pytest.approx(evaluated["accuracy"], abs=1e-6)
    assert scored["macro_f1"] == pytest.approx(evaluated["macro_f1"], abs=1e-6)
    assert scored["per_class"]["CONTINUATION"]["recall"] > 0.8
