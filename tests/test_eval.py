"""eval/: metrics on hand-computed cases and the gate."""

import copy
import json

import numpy as np
import pytest

from eval.metrics.classifier_metrics import calibration_metrics, classification_metrics, misclassified
from eval.metrics.latency import percentiles, time_batches_paired
from eval.metrics.thresholds import at_threshold, oos_recall, threshold_sweep
from eval.reports.gate import DEFAULT_POLICY, GateError, gate_passed, make_baseline, run_gate
from tests.verifier_support import OracleVerifier

LABELS = ["A", "B", "C"]
# Four messages, two labels: confidences .9 .6 .8 .7; the second (conf .6) is wrong.
PROBS = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.7, 0.3]])
Y = np.array([0, 1, 1, 0])


# --------------------------------------------------------------------------------- metrics
def test_classification_metrics_hand_case():
    m = classification_metrics([0, 0, 1, 1, 2], [0, 1, 1, 1, 0], LABELS)
    assert m["n"] == 5
    assert m["accuracy"] == pytest.approx(0.6)
    a, b, c = (m["per_class"][l] for l in LABELS)
    assert (a["precision"], a["recall"], a["f1"], a["support"]) == (0.5, 0.5, 0.5, 2)
    assert (
        b["precision"] == pytest.approx(2 / 3, abs=1e-6)
        and b["recall"] == 1.0
        and b["f1"] == pytest.approx(0.8)
    )
    assert (c["precision"], c["recall"], c["f1"], c["support"]) == (0.0, 0.0, 0.0, 1)
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 0.0) / 3, abs=1e-6)
    assert m["weighted_f1"] == pytest.approx((2 * 0.5 + 2 * 0.8) / 5, abs=1e-6)
    assert m["confusion_matrix"] == {"labels": LABELS, "matrix": [[1, 1, 0], [0, 2, 0], [1, 0, 0]]}


def test_calibration_metrics_hand_case():
    cal = calibration_metrics(PROBS, Y, n_bins=5)
    # bins (0.4,0.6]: conf .6 acc 0 -> .6; (0.6,0.8]: conf .75 acc 1 -> .25 x2; (0.8,1]: conf .9 acc 1 -> .1
    assert cal["ece"] == pytest.approx((0.6 + 2 * 0.25 + 0.1) / 4)
    assert cal["nll"] == pytest.approx(-np.mean(np.log([0.9, 0.4, 0.8, 0.7])), abs=1e-6)
    assert cal["brier"] == pytest.approx((0.02 + 0.72 + 0.08 + 0.18) / 4)
    assert cal["n_bins"] == 5 and [b["count"] for b in cal["bins"]] == [0, 0, 1, 2, 1]
    assert cal["bins"][3]["confidence"] == pytest.approx(0.75) and cal["bins"][3]["accuracy"] == 1.0
    assert cal["bins"][0]["confidence"] is None


def test_threshold_sweep_hand_case():
    rows = threshold_sweep(PROBS, Y, [0.95, 0.65, 0.75, 0.75])
    assert [r["tau"] for r in rows] == [0.65, 0.75, 0.95]
    r65, r75, r95 = rows
    assert (r65["accepted"], r65["accepted_share"], r65["accepted_accuracy"], r65["to_verifier_share"]) == (
        3,
        0.75,
        1.0,
        0.25,
    )
    assert r65["below_accuracy"] == 0.0
    assert (r75["accepted"], r75["accepted_share"], r75["accepted_accuracy"], r75["to_verifier_share"]) == (
        2,
        0.5,
        1.0,
        0.5,
    )
    assert r95["accepted"] == 0 and r95["accepted_accuracy"] is None and r95["to_verifier_share"] == 1.0
    assert all(r["oos_recall"] is None for r in rows)
    # confidence equal to tau is accepted, as in the router
    assert at_threshold(PROBS, Y, 0.7)["accepted"] == 3


def test_oos_recall_hand_case():
    oos = np.array([[0.5, 0.5], [0.95, 0.05], [0.7, 0.3]])
    r = oos_recall(oos, 0.75, low_signal=[False, True, False])
    assert r["n"] == 3 and r["recall"] == pytest.approx(2 / 3, abs=1e-6)
    assert r["guardrail_share"] == pytest.approx(1 / 3, abs=1e-6) and r["router_recall"] == 1.0
    assert r["mean_confidence"] == pytest.approx((0.5 + 0.95 + 0.7) / 3, abs=1e-6)
    assert "router_recall" not in oos_recall(oos, 0.75)
    rows = threshold_sweep(PROBS, Y, [0.5, 0.96], oos_probs=oos)  # 0.5 is not below 0.5
    assert [r["oos_recall"] for r in rows] == [0.0, 1.0]


def test_misclassified_most_confident_first():
    probs = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7], [0.05, 0.9, 0.05], [0.8, 0.1, 0.1]])
    out = misclassified(["a", "b", "c", "d"], [0, 0, 0, 0], probs, LABELS, tau=0.75, rows=[11, 12, 13, 14])
    assert [e["row"] for e in out] == [13, 12]
    assert out[0] == {
        "row": 13,
        "where": None,
        "text": "c",
        "label": "A",
        "predicted": "B",
        "confidence": 0.9,
        "label_probability": 0.05,
        "accepted": True,
    }
    assert out[1]["accepted"] is False


def test_percentiles():
    p = percentiles(list(range(1, 101)))
    assert p["n"] == 100 and p["p50_ms"] == 50.5 and p["max_ms"] == 100
    assert p["p95_ms"] == pytest.approx(95.05) and p["p99_ms"] == pytest.approx(99.01)
    assert percentiles([])["p50_ms"] is None


def test_paired_batches_go_through_each_function_in_turn_and_keep_their_times_apart(monkeypatch):
    import eval.metrics.latency

    clock = [0.0]  # a clock only the slow function moves: the split of times is exact, whatever the load
    monkeypatch.setattr(eval.metrics.latency.time, "perf_counter", lambda: clock[0])
    calls = []
    slow = lambda b: (calls.append(("slow", tuple(b))), clock.__setitem__(0, clock[0] + 0.004))  # noqa: E731
    fast = lambda b: calls.append(("fast", tuple(b)))  # noqa: E731
    n, (slow_s, fast_s) = time_batches_paired([slow, fast], ["a", "b", "c"], batch_size=2)
    assert n == 3
    assert calls == [("slow", ("a", "b")), ("fast", ("a", "b")), ("slow", ("c",)), ("fast", ("c",))]
    assert slow_s == pytest.approx(0.008) and fast_s == 0.0  # each call's time is its own function's
    calls.clear()
    n, seconds = time_batches_paired([slow, fast], ["a", "b", "c"], batch_size=2, min_seconds=0.02)
    assert n == 9 and len(calls) == 12 and sum(seconds) >= 0.02  # whole passes until the sum is reached


def test_verifier_lift_hand_case():
    from eval.metrics.verifier_lift import verifier_lift

    labels = ["SEARCH", "ACTION"]
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.45, 0.55], [0.3, 0.7]])
    y = np.array([0, 1, 1, 0])  # below tau .75: rows 1 (clf wrong), 2 (clf right), 3 (clf wrong)
    texts = ["t0", "t1", "t2", "t3"]
    v = verifier_lift(OracleVerifier({"t1": "ACTION", "t2": "ACTION"}), texts, y, probs, labels, 0.75)
    assert (v["n_below"], v["n_verified"], v["answered"], v["failed"]) == (3, 3, 2, 1)
    assert v["failures"] == {"timeout": 1}
    assert v["classifier_accuracy"] == pytest.approx(1 / 3, abs=1e-6)
    assert v["verifier_accuracy"] == pytest.approx(2 / 3, abs=1e-6)
    assert v["lift"] == pytest.approx(1 / 3, abs=1e-6)
    assert v["verifier_accuracy_answered"] == 1.0
    assert v["end_to_end_accuracy"] == pytest.approx(
        3 / 4
    )  # row 0 accepted and right, rows 1-2 verified right
    cut = verifier_lift(OracleVerifier({}), texts, y, probs, labels, 0.75, max_messages=1)
    assert cut["n_verified"] == 1 and cut["end_to_end_accuracy"] is None


# ------------------------------------------------------------------------------------ gate
def _report(accuracy=0.9, macro_f1=0.88, ece=0.03, accepted_accuracy=0.95, f1=None, tau=0.75):
    f1 = f1 or {"A": 0.9, "B": 0.86}
    return {
        "schema_version": 1,
        "kind": "intent-router-eval",
        "created_at": "2025-01-01T00:00:00Z",
        "model": {"model_id": "m@1/int8", "backend": "onnx"},
        "data": {"source": "test.jsonl", "sha256": "abc", "n": 100},
        "threshold": tau,
        "classification": {
            "accuracy": accuracy,
            "macro_f1": macro_f1,
            "per_class": {l: {"precision": v, "recall": v, "f1": v, "support": 50} for l, v in f1.items()},
        },
        "calibration": {"ece": ece},
        "thresholds": {
            "tau": tau,
            "at_tau": {"tau": tau, "accepted_accuracy": accepted_accuracy},
            "sweep": [
                {"tau": 0.5, "accepted_accuracy": 0.9},
                {"tau": tau, "accepted_accuracy": accepted_accuracy},
            ],
        },
    }


@pytest.fixture
def baseline():
    return make_baseline(_report())


def test_baseline_limits_follow_the_default_policy(baseline):
    assert baseline["kind"] == "intent-router-eval-baseline" and baseline["schema_version"] == 1
    assert baseline["tolerances"] == {"accuracy": 0.02, "macro_f1": 0.02, "accepted_accuracy": 0.02}
    assert baseline["class_f1_floors"] == {"A": pytest.approx(0.85), "B": pytest.approx(0.81)}
    assert baseline["ece_ceiling"] == pytest.approx(0.03 + DEFAULT_POLICY["ece_margin"])
    assert make_baseline(_report(), class_f1_margin=0.1)["class_f1_floors"]["A"] == pytest.approx(0.8)
    with pytest.raises(ValueError):
        make_baseline(_report(), nonsense=1)


def test_gate_passes_on_same_and_within_tolerance(baseline):
    assert gate_passed(run_gate(_report(), baseline))
    checks = run_gate(
        _report(
            accuracy=0.885, macro_f1=0.865, ece=0.045, accepted_accuracy=0.935, f1={"A": 0.86, "B": 0.82}
        ),
        baseline,
    )
    assert gate_passed(checks), [c for c in checks if not c.passed]
    assert [c.name for c in checks] == [
        "accuracy",
        "macro_f1",
        "f1[A]",
        "f1[B]",
        "ece",
        "accepted_accuracy@0.75",
    ]


@pytest.mark.parametrize(
    "change, failing",
    [
        (dict(accuracy=0.87), "accuracy"),
        (dict(macro_f1=0.85), "macro_f1"),
        (dict(f1={"A": 0.84, "B": 0.86}), "f1[A]"),
        (dict(f1={"A": 0.9}), "f1[B]"),  # a class missing from the report
        (dict(ece=0.06), "ece"),
        (dict(accepted_accuracy=0.92), "accepted_accuracy@0.75"),
        (dict(accepted_accuracy=None), "accepted_accuracy@0.75"),  # nothing accepted any more
    ],
)
def test_gate_fails_each_check(baseline, change, failing):
    checks = run_gate(_report(**change), baseline)
    assert not gate_passed(checks)
    assert [c.name for c in checks if not c.passed] == [failing]


def test_gate_uses_the_baseline_tau_from_the_sweep(baseline):
    report = _report(tau=0.5)  # evaluated at another tau: the sweep still has 0.75
    report["thresholds"]["sweep"] = [{"tau": 0.75, "accepted_accuracy": 0.5}]
    assert [c.name for c in run_gate(report, baseline) if not c.passed] == ["accepted_accuracy@0.75"]
    report["thresholds"]["sweep"] = []
    failed = [c for c in run_gate(report, baseline) if not c.passed]
    assert failed[0].detail.startswith("the report has no row")


def test_gate_refuses_a_bad_baseline(baseline):
    with pytest.raises(GateError):
        run_gate(_report(), {**baseline, "kind": "other"})
    bad = copy.deepcopy(baseline)
    del bad["ece_ceiling"]
    with pytest.raises(GateError, match="ece_ceiling"):
        run_gate(_report(), bad)


def test_gate_cli_exit_codes(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    good, worse = tmp_path / "good.json", tmp_path / "worse.json"
    good.write_text(json.dumps(_report()))
    worse.write_text(json.dumps(_report(ece=0.2)))
    base = tmp_path / "eval" / "baseline.json"
    runner = CliRunner()
    r = runner.invoke(app, ["gate", "--report", str(good), "--baseline", str(base)])
    assert r.exit_code == 2 and "baseline not found" in r.output
    r = runner.invoke(app, ["gate", "--report", str(good), "--baseline", str(base), "--write-baseline"])
    assert r.exit_code == 0 and json.loads(base.read_text())["metrics"]["accuracy"] == 0.9
    r = runner.invoke(app, ["gate", "--report", str(good), "--baseline", str(base)])
    assert r.exit_code == 0 and "gate passed" in r.output
    r = runner.invoke(app, ["gate", "--report", str(worse), "--baseline", str(base)])
    assert r.exit_code == 1 and "FAIL" in r.output and "gate failed" in r.output and "ece" in r.output
    r = runner.invoke(app, ["gate", "--report", str(worse), "--baseline", str(base), "--json"])
    assert r.exit_code == 1 and json.loads(r.output)["passed"] is False
