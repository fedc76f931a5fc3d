"""The challenger gate (intent-router compare): McNemar's tests against known values, the verdict rule, the
refusals of bad input, and the command end to end on the shipped models."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from eval.compare.figures import (
    P99_MIN_SAMPLES,
    CompareError,
    Routed,
    Rule,
    latency_checks,
    mcnemar_chi2,
    mcnemar_exact,
    min_discordant,
    paired,
    per_class,
    percentile,
    verdict,
)
from eval.compare.report import load_rows, shared_labels
from tests.conftest import FAST, ROOT, SHIPPED

LABELS = {"compared": ["SEARCH", "ACTION", "OUT_OF_SCOPE"], "only_incumbent": [], "only_candidate": []}


# ------------------------------------------------------------------------------- statistics
@pytest.mark.parametrize(
    ("n01", "n10", "p"),
    [
        (10, 2, 158 / 4096),  # 2 * (C(12,0) + C(12,1) + C(12,2)) / 2^12 = 0.0385742...
        (2, 10, 158 / 4096),  # two-sided: symmetric
        (0, 5, 2 / 32),
        (0, 6, 2 / 64),
        (6, 2, 2 * (1 + 8 + 28) / 256),
        (3, 3, 1.0),  # 2 * P(X <= 3) > 1 is capped
        (0, 0, 1.0),
    ],
)
def test_mcnemar_exact_known_values(n01, n10, p):
    assert mcnemar_exact(n01, n10) == pytest.approx(p, abs=1e-15)


def test_mcnemar_exact_value_and_large_counts():
    assert round(mcnemar_exact(10, 2), 6) == 0.038574
    # big counts stay exact integers until the last division (scipy.stats.binomtest(500, 1060).pvalue)
    assert mcnemar_exact(500, 560) == pytest.approx(0.0699095594602694, rel=1e-12)
    assert mcnemar_exact(0, 2000) == 0.0  # 2 / 2^2000 underflows to 0, without an error


def test_mcnemar_chi2_continuity_corrected():
    stat, p = mcnemar_chi2(10, 2)
    assert stat == pytest.approx(49 / 12)  # (|10 - 2| - 1)^2 / 12
    assert p == pytest.approx(0.0433081428, abs=1e-9)  # chi-square survival at 4.0833, 1 degree of freedom
    stat, p = mcnemar_chi2(7, 2)
    assert stat == pytest.approx(16 / 9) and p == pytest.approx(math.erfc(math.sqrt(8 / 9)))
    assert mcnemar_chi2(3, 3) == (0.0, 1.0)  # the correction does not go below 0
    assert mcnemar_chi2(0, 0) == (0.0, 1.0)


def test_fewest_discordant_pairs_that_can_reach_alpha():
    assert min_discordant(0.05) == 6  # 2 / 2^5 = 0.0625, 2 / 2^6 = 0.03125
    assert min_discordant(0.01) == 8
    assert mcnemar_exact(0, min_discordant(0.05)) < 0.05 <= mcnemar_exact(0, min_discordant(0.05) - 1)


def test_percentile():
    assert percentile([], 50) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5


# --------------------------------------------------------------------------------- verdict
def _names(checks) -> list[str]:
    return [c.name for c in checks if not c.passed]


def test_verdict_passes_a_candidate_no_worse():
    checks = verdict(Rule(), 1000, n01=5, n10=7, confident_incumbent=10, confident_candidate=10)
    assert _names(checks) == []


def test_verdict_fails_on_significance_within_the_margin():
    # 8 more errors in 1000 is inside a 5-point margin, but McNemar p = 0.0386 < 0.05 with n01 > n10
    checks = verdict(Rule(margin=0.05), 1000, n01=10, n10=2, confident_incumbent=0, confident_candidate=0)
    assert _names(checks) == ["significance"]
    assert checks[1].value == pytest.approx(0.038574)
    # the same counts the other way round are a better candidate: no failure
    assert _names(verdict(Rule(margin=0.05), 1000, 2, 10, 0, 0)) == []
    # alpha below the p-value: not significant
    assert _names(verdict(Rule(margin=0.05, alpha=0.01), 1000, 10, 2, 0, 0)) == []


def test_verdict_fails_on_the_margin():
    # 4 more errors in 100 (p = 0.289, not significant) exceed a one-point margin
    checks = verdict(Rule(margin=0.01), 100, n01=6, n10=2, confident_incumbent=0, confident_candidate=0)
    assert _names(checks) == ["accuracy"]
    assert _names(verdict(Rule(margin=0.04), 100, 6, 2, 0, 0)) == []  # exactly at the margin passes
    assert _names(verdict(Rule(), 100, 3, 3, 0, 0)) == []  # equal accuracy passes at margin 0


def test_verdict_fails_on_confident_mistakes():
    rule = Rule(confident_tolerance=1.0)  # 1 per 1000: one extra allowed on 1000 messages
    assert _names(verdict(rule, 1000, 0, 0, confident_incumbent=10, confident_candidate=11)) == []
    assert _names(verdict(rule, 1000, 0, 0, 10, 12)) == ["confident_mistakes"]
    assert _names(verdict(rule, 500, 0, 0, 10, 11)) == ["confident_mistakes"]  # 0.5 allowed
    assert _names(verdict(Rule(confident_tolerance=0), 1000, 0, 0, 10, 11)) == ["confident_mistakes"]
    assert _names(verdict(rule, 1000, 0, 0, 10, 3)) == []  # fewer is fine


@pytest.mark.parametrize(
    "rule", [Rule(alpha=0.0), Rule(alpha=1.0), Rule(margin=-0.1), Rule(confident_tolerance=-1)]
)
def test_rule_refuses_bad_options(rule):
    with pytest.raises(CompareError):
        rule.check()


def test_rule_text_states_the_rule():
    text = Rule(margin=0.01, alpha=0.05, confident_tolerance=1).text()
    assert "incumbent accuracy - 0.01" in text and "p < 0.05" in text and "1 per 1000" in text


# --------------------------------------------------------------------------------- figures
def test_rows_right_confident_mistakes_and_per_class():
    gold = ["SEARCH", "SEARCH", "ACTION", "OUT_OF_SCOPE", "OUT_OF_SCOPE"]
    inc = Routed(
        gold,
        ["SEARCH", "ACTION", "ACTION", None, "SEARCH"],
        ["confident"] * 3 + ["out_of_scope", "clarify"],
        [1.0] * 5,
    )
    cand = Routed(
        gold,
        ["SEARCH", "SEARCH", None, None, "ACTION"],
        ["confident", "confident", "clarify", "out_of_scope", "confident"],
        [2.0] * 5,
    )
    assert inc.right == [True, False, True, True, False]
    assert inc.confident == [False, True, False, False, False]  # the unsure wrong row is not confident
    assert cand.confident == [False, False, False, False, True]  # out of scope routed confidently
    p = paired(inc, cand, 0.05)
    assert (p["n01"], p["n10"], p["both_right"], p["both_wrong"]) == (1, 1, 2, 1)
    rows = {r["label"]: r for r in per_class(inc, cand)}
    assert rows["SEARCH"]["recall"] == {"incumbent": 0.5, "candidate": 1.0, "delta": 0.5}
    assert rows["ACTION"]["f1"]["incumbent"] == pytest.approx(2 / 3)  # 1 right, 2 routed to ACTION
    assert rows["OUT_OF_SCOPE"]["f1"] is None and rows["(no intent)"]["n"] == 2
    assert inc.figures()["latency_ms"]["p50"] == 1.0 and cand.figures()["confident_mistakes"] == 1


def _timed(ms: list[float]) -> Routed:
    return Routed(["SEARCH"] * len(ms), ["SEARCH"] * len(ms), ["confident"] * len(ms), ms)


def test_a_slower_candidate_fails_the_latency_checks():
    """A candidate 2.2x slower at p50 passes every other check but not this one; p99 counts from 100
    messages on; a limit of 0 turns a check off."""
    inc = _timed([1.0 + 0.001 * i for i in range(120)])
    slow = _timed([2.2 * (1.0 + 0.001 * i) for i in range(120)])
    checks = {c.name: c for c in latency_checks(Rule(), inc, slow)}
    assert not checks["latency_p50"].passed and checks["latency_p50"].value == pytest.approx(2.2)
    assert not checks["latency_p99"].passed  # 2.2 > 2.0
    assert all(c.passed for c in latency_checks(Rule(), inc, _timed(list(inc.ms))))
    assert [c.name for c in latency_checks(Rule(max_p50_ratio=0, max_p99_ratio=0), inc, slow)] == []
    tail = _timed([*inc.ms[:-3], 9.0, 9.0, 9.0])  # the same median, a slow tail
    checks = {c.name: c for c in latency_checks(Rule(), inc, tail)}
    assert checks["latency_p50"].passed and not checks["latency_p99"].passed
    few = P99_MIN_SAMPLES - 1
    checks = {c.name: c for c in latency_checks(Rule(), _timed(inc.ms[:few]), _timed(tail.ms[-few:]))}
    assert checks["latency_p99"].passed and "not checked" in checks["latency_p99"].detail
    with pytest.raises(CompareError, match="--max-p50-ratio"):
        Rule(max_p50_ratio=0.5).check()


def test_notes_name_a_split_a_model_was_built_on_and_rows_the_review_queue_picked(tmp_path):
    """data/dev.jsonl calibrated the shipped model (its sha256 is in the manifest), review rows carry
    'why': both are said; the test split, which no model was fitted on, is not."""
    import hashlib

    from eval.compare.data_notes import data_notes

    def entry(path):
        return {"source": str(path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}

    reviewed = tmp_path / "queue.jsonl"
    rows = [
        {"text": "cheaper please", "label": "CONTINUATION", "why": "unsure"},
        {"text": "hi", "label": "X"},
    ]
    reviewed.write_text("".join(json.dumps(r) + "\n" for r in rows))
    files = [entry(ROOT / "data" / "dev.jsonl"), entry(ROOT / "data" / "test.jsonl"), entry(reviewed)]
    notes = data_notes(files, {"incumbent": SHIPPED, "candidate": FAST})
    dev = [n for n in notes if n.startswith(str(ROOT / "data" / "dev.jsonl"))]
    assert any("the incumbent's calibration split" in n for n in dev)
    assert not any(n.startswith(str(ROOT / "data" / "test.jsonl")) for n in notes)
    assert [n for n in notes if n.startswith(str(reviewed))] == [
        f"{reviewed}: 1 row(s) carry the review queue's fields: picked from the incumbent's least sure "
        "answers, which favours any candidate; add rows drawn at random from traffic"
    ]


def _router(labels, intents):
    return SimpleNamespace(classifier=SimpleNamespace(labels=labels), intents=intents)


def test_label_sets_must_match_unless_allowed():
    a = _router(["ACTION", "OUT_OF_SCOPE", "SEARCH"], ("ACTION", "SEARCH"))
    b = _router(["ACTION", "MEMORY", "OUT_OF_SCOPE", "SEARCH"], ("ACTION", "MEMORY", "SEARCH"))
    assert (
        shared_labels(a, _router(list(reversed(a.classifier.labels)), a.intents), False)["changed"] is False
    )
    with pytest.raises(CompareError, match=r"only the candidate: MEMORY.*--allow-label-change"):
        shared_labels(a, b, False)
    labels = shared_labels(a, b, True)
    assert labels["compared"] == ["ACTION", "OUT_OF_SCOPE", "SEARCH"] and labels["only_candidate"] == [
        "MEMORY"
    ]


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(path)


def test_data_refusals(tmp_path):
    conv = _jsonl(tmp_path / "c.jsonl", [{"turns": [{"text": "find the deck", "label": "SEARCH"}]}])
    with pytest.raises(CompareError, match="conversation rows"):
        load_rows([conv], LABELS)
    comp = _jsonl(
        tmp_path / "p.jsonl", [{"text": "find the deck and send it", "labels": ["ACTION", "SEARCH"]}]
    )
    with pytest.raises(CompareError, match="line 1 is a compound request"):
        load_rows([comp], LABELS)
    bad = _jsonl(
        tmp_path / "b.jsonl", [{"text": "find the deck", "label": "SEARCH"}, {"text": "x", "label": "NOPE"}]
    )
    with pytest.raises(CompareError, match=r"b.jsonl:2: unknown label 'NOPE'"):
        load_rows([bad], LABELS)
    ok = _jsonl(tmp_path / "ok.jsonl", [{"text": "find the deck", "label": "SEARCH"}])
    with pytest.raises(CompareError, match="given twice"):
        load_rows([ok, ok], LABELS)
    with pytest.raises(CompareError, match="file not found"):
        load_rows([str(tmp_path / "none.jsonl")], LABELS)


def test_label_change_leaves_out_rows_of_labels_not_shared(tmp_path):
    labels = {**LABELS, "only_candidate": ["MEMORY"]}
    rows = [{"text": "find the deck", "label": "SEARCH"}, {"text": "remember my size", "label": "MEMORY"}]
    out = load_rows([_jsonl(tmp_path / "d.jsonl", rows)], labels)
    assert out["labels"] == ["SEARCH"] and out["where"] == [f"{tmp_path / 'd.jsonl'}:1"]
    assert out["data"]["left_out"] == 1 and len(out["data"]["sha256"]) == 64


def test_bad_input_exits_2(tmp_path):
    from cli import app

    runner = CliRunner()
    data = _jsonl(tmp_path / "d.jsonl", [{"text": "find the deck", "label": "SEARCH"}])
    base = ["compare", "--data", data, "--out", str(tmp_path / "out")]
    res = runner.invoke(app, [*base, "--candidate", str(SHIPPED), "--incumbent", str(tmp_path / "none")])
    assert res.exit_code == 2 and "--incumbent" in res.output and "no manifest.json" in res.output
    res = runner.invoke(
        app, [*base, "--candidate", str(SHIPPED), "--incumbent", str(SHIPPED), "--alpha", "0"]
    )
    assert res.exit_code == 2 and "--alpha must be in (0, 1)" in res.output
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------ end to end
def _slice(tmp_path, n=60) -> str:
    """Every k-th row of data/dev.jsonl: all its labels, out of scope and continuations included."""
    rows = (ROOT / "data" / "dev.jsonl").read_text(encoding="utf-8").splitlines()
    step = len(rows) // n
    path = tmp_path / "dev60.jsonl"
    path.write_text("\n".join(rows[::step][:n]) + "\n", encoding="utf-8")
    return str(path)


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-c", "from cli import main; main()", "compare", *args]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_compare_a_model_with_itself_passes(tmp_path):
    data, out = _slice(tmp_path), tmp_path / "out"
    res = _run("--candidate", str(SHIPPED), "--incumbent", str(SHIPPED), "--data", data, "--out", str(out))
    assert res.returncode == 0, res.stderr + res.stdout
    assert "candidate passes" in res.stdout
    result = json.loads((out / "compare.json").read_text())
    assert result["kind"] == "intent-router-compare" and result["schema_version"] == 1
    assert result["passed"] is True and result["data"]["n"] == 60
    p = result["paired"]
    assert p["n01"] == p["n10"] == 0 and p["mcnemar_exact_p"] == 1.0 and result["discordant"] == []
    assert result["incumbent"]["accuracy"] == result["candidate"]["accuracy"]
    assert result["incumbent"]["model_id"] == result["candidate"]["model_id"]
    assert result["confident_mistakes"]["delta"] == 0
    assert {r["label"] for r in result["per_class"]} >= {"OUT_OF_SCOPE", "CONTINUATION", "(no intent)"}
    assert result["incumbent"]["latency_ms"]["samples"] == 60 and result["incumbent"]["latency_ms"]["p50"] > 0
    assert len(result["data"]["sha256"]) == 64
    assert "**PASS**" in (out / "compare.md").read_text()


def test_compare_the_fast_model_with_the_shipped_one(tmp_path):
    data, out = _slice(tmp_path), tmp_path / "out"
    res = _run(
        "--candidate", str(FAST), "--incumbent", str(SHIPPED), "--data", data, "--out", str(out), "--json"
    )
    assert res.returncode in (0, 1), res.stderr
    result = json.loads(res.stdout)
    assert result == json.loads((out / "compare.json").read_text())
    assert res.returncode == (0 if result["passed"] else 1)
    assert result["passed"] == all(c["passed"] for c in result["checks"])
    p, n = result["paired"], result["data"]["n"]
    assert p["n01"] + p["n10"] + p["both_right"] + p["both_wrong"] == n == 60
    assert p["accuracy_delta"] == round((p["n10"] - p["n01"]) / n, 6)
    assert result["candidate"]["right"] - result["incumbent"]["right"] == p["n10"] - p["n01"]
    assert len(result["discordant"]) == p["n01"] + p["n10"]
    assert p["mcnemar_exact_p"] == round(mcnemar_exact(p["n01"], p["n10"]), 6)
    assert result["candidate"]["model_id"].startswith("intent-minilm-fast@")
