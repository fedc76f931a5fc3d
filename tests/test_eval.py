"""eval/: metrics on hand-computed cases, the gate, the report schema, plots, data loading and one
end-to-end evaluation of the tiny model (ONNX and PyTorch)."""

import copy
import json
import math

import numpy as np
import pytest

from eval.data import DataError, load_labeled, load_unlabeled
from eval.evaluator import run_evaluation
from eval.gate import DEFAULT_POLICY, GateError, gate_passed, make_baseline, run_gate, write_baseline
from eval.latency import percentiles
from eval.metrics import calibration_metrics, classification_metrics, misclassified
from eval.report import load_report, load_schema, write_report
from eval.thresholds import at_threshold, oos_recall, threshold_sweep
from router.verifier import VerifierError, VerifierResult
from tests.conftest import TINY

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


class _Oracle:
    """Answers the true label for known texts, fails on others."""

    def __init__(self, truth):
        self.truth = truth

    def verify(self, text, classification, previous=None):
        if text not in self.truth:
            raise VerifierError("no idea", status="timeout")
        return VerifierResult(intent=self.truth[text])


def test_verifier_lift_hand_case():
    from eval.verifier_lift import verifier_lift

    labels = ["SEARCH", "ACTION"]
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.45, 0.55], [0.3, 0.7]])
    y = np.array([0, 1, 1, 0])  # below tau .75: rows 1 (clf wrong), 2 (clf right), 3 (clf wrong)
    texts = ["t0", "t1", "t2", "t3"]
    v = verifier_lift(_Oracle({"t1": "ACTION", "t2": "ACTION"}), texts, y, probs, labels, 0.75)
    assert (v["n_below"], v["n_verified"], v["answered"], v["failed"]) == (3, 3, 2, 1)
    assert v["failures"] == {"timeout": 1}
    assert v["classifier_accuracy"] == pytest.approx(1 / 3, abs=1e-6)
    assert v["verifier_accuracy"] == pytest.approx(2 / 3, abs=1e-6)
    assert v["lift"] == pytest.approx(1 / 3, abs=1e-6)
    assert v["verifier_accuracy_answered"] == 1.0
    assert v["end_to_end_accuracy"] == pytest.approx(
        3 / 4
    )  # row 0 accepted and right, rows 1-2 verified right
    cut = verifier_lift(_Oracle({}), texts, y, probs, labels, 0.75, max_messages=1)
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


# ------------------------------------------------------------------------------------ data
def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_load_labeled_jsonl_and_csv(tmp_path):
    j = _write(
        tmp_path / "t.jsonl",
        '{"text": "find the deck", "label": "SEARCH"}\n\n{"text": "run it", "label": "ACTION"}\n',
    )
    d = load_labeled(j)
    assert d.texts == ["find the deck", "run it"] and d.labels == ["SEARCH", "ACTION"]
    assert d.rows == [1, 2] and d.lines == [1, 3] and d.format == "jsonl" and len(d.sha256) == 64
    c = _write(tmp_path / "t.csv", 'message,intent\n"find the deck, please",SEARCH\nrun it,ACTION\n')
    d = load_labeled(c, text_column="message", label_column="intent")
    assert (
        d.texts == ["find the deck, please", "run it"]
        and d.labels == ["SEARCH", "ACTION"]
        and d.format == "csv"
    )
    assert d.where(1) == "row 2"


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_load_labeled_reports_bad_rows(tmp_path, kind):
    if kind == "jsonl":
        f = _write(
            tmp_path / "bad.jsonl",
            '{"text": "ok", "label": "SEARCH"}\n{"text": "hm", "label": "WEATHER"}\n'
            '{"text": "  ", "label": "ACTION"}\n{"text": "x", "label": ""}\n',
        )
        at = [f"{f}:2", "line 3", "line 4"]
    else:
        f = _write(tmp_path / "bad.csv", "text,label\nok,SEARCH\nhm,WEATHER\n,ACTION\nx,\n")
        at = [f"{f}: row 2", "row 3", "row 4"]
    with pytest.raises(DataError) as e:
        load_labeled(f)
    msg = str(e.value)
    assert str(f) in msg and "3 invalid row(s)" in msg
    assert f"{at[0]}: unknown label 'WEATHER'" in msg and "\n" not in msg
    assert f"more invalid row(s): {at[1]}, {at[2]}" in msg
    assert e.value.problems[1:] == [
        f"{str(f) + ':3' if kind == 'jsonl' else str(f) + ': row 3'}: empty 'text'",
        f"{str(f) + ':4' if kind == 'jsonl' else str(f) + ': row 4'}: empty 'label'",
    ]
    d = load_labeled(f, skip_invalid=True)
    assert d.texts == ["ok"] and [s["row"] for s in d.skipped] == [2, 3, 4]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_load_labeled_missing_column(tmp_path, kind):
    f = (
        _write(tmp_path / "t.jsonl", '{"message": "find it", "label": "SEARCH"}\n')
        if kind == "jsonl"
        else _write(tmp_path / "t.csv", "message,label\nfind it,SEARCH\n")
    )
    with pytest.raises(
        DataError, match=r"no column 'text' \(columns: message, label\); name it with --text-column"
    ):
        load_labeled(f)
    with pytest.raises(DataError, match=r"no column 'intent'.*--label-column"):
        load_labeled(f, text_column="message", label_column="intent")


def test_load_errors_for_files(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_labeled(tmp_path / "missing.jsonl")
    with pytest.raises(DataError, match="unknown file type"):
        load_labeled(_write(tmp_path / "t.txt", "hello\n"))
    with pytest.raises(DataError, match=r"broken.jsonl:2: invalid JSON"):
        load_labeled(_write(tmp_path / "broken.jsonl", '{"text": "a", "label": "SEARCH"}\nnot json\n'))
    with pytest.raises(DataError, match="must be a string, got int"):
        load_labeled(
            _write(tmp_path / "int.jsonl", '{"text": "a", "label": "SEARCH"}\n{"text": "b", "label": 3}\n')
        )
    with pytest.raises(DataError, match="the model knows: X, Y"):
        load_labeled(_write(tmp_path / "l.jsonl", '{"text": "a", "label": "SEARCH"}\n'), labels=["X", "Y"])


def test_load_unlabeled(tmp_path):
    f = _write(tmp_path / "oos.jsonl", '{"text": "hi"}\n{"text": " "}\n{"text": "thanks", "label": null}\n')
    d = load_unlabeled(f)
    assert d.texts == ["hi", " ", "thanks"] and d.lines == [1, 2, 3]
    with pytest.raises(DataError, match=r"oos2.jsonl:2: empty 'text'"):
        load_unlabeled(_write(tmp_path / "oos2.jsonl", '{"text": "hi"}\n{"text": ""}\n'))


# ----------------------------------------------------------------------- end to end, schema
def _validate(instance, schema):
    """jsonschema when installed, else a small validator for the keywords the schema uses."""
    try:
        import jsonschema
    except ImportError:
        _mini_validate(instance, schema, schema, "$")
    else:
        jsonschema.validate(instance, schema)


_TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def _is_type(x, t):
    if t == "integer":
        return isinstance(x, int) and not isinstance(x, bool)
    if t == "number":
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
    return isinstance(x, _TYPES[t])


def _mini_validate(x, s, root, path):
    if "$ref" in s:
        target = root
        for part in s["$ref"].lstrip("#/").split("/"):
            target = target[part]
        _mini_validate(x, target, root, path)
    for sub in s.get("allOf", []):
        _mini_validate(x, sub, root, path)
    if "oneOf" in s:
        ok = 0
        for sub in s["oneOf"]:
            try:
                _mini_validate(x, sub, root, path)
                ok += 1
            except AssertionError:
                pass
        assert ok == 1, f"{path}: matches {ok} of oneOf"
    if "type" in s:
        types = s["type"] if isinstance(s["type"], list) else [s["type"]]
        assert any(_is_type(x, t) for t in types), f"{path}: {x!r} is not {types}"
    if "const" in s:
        assert x == s["const"], f"{path}: {x!r} != {s['const']!r}"
    if "enum" in s:
        assert x in s["enum"], f"{path}: {x!r} not in {s['enum']}"
    if _is_type(x, "number"):
        assert x >= s.get("minimum", -math.inf) and x <= s.get("maximum", math.inf), (
            f"{path}: {x} out of range"
        )
        assert x > s.get("exclusiveMinimum", -math.inf), f"{path}: {x} out of range"
    if isinstance(x, dict):
        for k in s.get("required", []):
            assert k in x, f"{path}: missing {k!r}"
        props = s.get("properties", {})
        for k, v in x.items():
            if k in props:
                _mini_validate(v, props[k], root, f"{path}.{k}")
            elif isinstance(s.get("additionalProperties"), dict):
                _mini_validate(v, s["additionalProperties"], root, f"{path}.{k}")
    if isinstance(x, list):
        assert len(x) >= s.get("minItems", 0), f"{path}: too few items"
        for i, v in enumerate(x):
            if "items" in s:
                _mini_validate(v, s["items"], root, f"{path}[{i}]")


def test_the_mini_validator_catches_mistakes():
    schema = load_schema()
    with pytest.raises(AssertionError):
        _mini_validate({"schema_version": 1}, schema, schema, "$")
    with pytest.raises(AssertionError):
        _mini_validate(1.5, {"$ref": "#/$defs/share"}, schema, "$")
    with pytest.raises(AssertionError):
        _mini_validate({"row": 1}, schema["properties"]["misclassified"]["items"], schema, "$")


@pytest.fixture(scope="module")
def onnx_report(tiny_exported):
    model_dir, _ = tiny_exported
    return run_evaluation(model_dir, TINY / "test.jsonl", oos=TINY / "oos.jsonl", max_latency_samples=20)


@pytest.mark.slow
def test_end_to_end_onnx_report(onnx_report, tiny_exported, tmp_path):
    _model_dir, manifest = tiny_exported
    r = onnx_report
    _validate(r, load_schema())
    assert r["model"]["backend"] == "onnx" and r["model"]["variant"] == "int8"
    assert r["model"]["model_id"] == f"{manifest.model_id}/int8" and r["model"]["labels"] == manifest.labels
    assert r["threshold"] == 0.75 and r["thresholds"]["at_tau"]["tau"] == 0.75
    assert r["data"]["n"] == 12 and sum(r["data"]["label_counts"].values()) == 12
    c = r["classification"]
    assert c["n"] == 12 and sum(map(sum, c["confusion_matrix"]["matrix"])) == 12
    assert len(r["misclassified"]) == round(12 * (1 - c["accuracy"]))
    sc = r["scope"]  # 10 in-scope + 2 OUT_OF_SCOPE rows, and the 7-row --oos file
    assert sc["in_scope"]["n"] == 10 and sc["out_of_scope"]["n"] == 2 and sc["oos_file"]["n"] == 7
    assert sc["distance_threshold"] == pytest.approx(manifest.in_scope.threshold, abs=1e-5)  # rounded
    assert [row["tau"] for row in r["thresholds"]["sweep"]][:2] == [0.3, 0.35] and r["thresholds"]["sweep"][
        -1
    ]["tau"] == 0.95
    assert r["oos"]["n"] == 7 and 0 <= r["oos"]["recall"] <= r["oos"]["router_recall"] <= 1
    assert r["oos"]["guardrail_share"] > 0  # "???" and "asdfgh" never reach the classifier in the router
    assert r["latency"]["single"]["n"] == 12 and r["latency"]["single"]["p50_ms"] > 0
    assert r["latency"]["batch"]["messages_per_second"] > 0
    assert r["verifier"] is None

    paths = write_report(r, tmp_path / "out")
    assert {p.name for p in paths.values()} == {
        "eval.json",
        "report.md",
        "confusion_matrix.png",
        "reliability.png",
        "thresholds.png",
    }
    for key in ("confusion_matrix", "reliability", "thresholds"):
        data = paths[key].read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
    assert load_report(paths["json"]) == json.loads(json.dumps(r))
    md = paths["markdown"].read_text()
    for heading in (
        "## Summary",
        "## Per class",
        "## Confusion matrix",
        "## Calibration",
        "## Threshold sweep",
        "## Out of scope",
        "## Latency",
        "## Misclassified",
    ):
        assert heading in md
    assert "**0.75**" in md and "(confusion_matrix.png)" in md


@pytest.mark.slow
def test_torch_backend_matches_onnx(onnx_report, tiny_exported):
    model_dir, manifest = tiny_exported
    from training.pipeline import evaluate_model

    r = evaluate_model(model_dir, TINY / "test.jsonl", backend="torch", max_latency_samples=2)
    _validate(r, load_schema())
    assert r["model"]["backend"] == "torch" and r["model"]["variant"] is None
    assert r["model"]["model_id"] == f"{manifest.model_id}/torch"
    assert r["model"]["temperature"] == pytest.approx(manifest.calibration.temperature)
    assert r["classification"]["confusion_matrix"] == onnx_report["classification"]["confusion_matrix"]
    assert r["calibration"]["ece"] == pytest.approx(onnx_report["calibration"]["ece"], abs=0.02)
    assert r["oos"] is None


@pytest.mark.slow
def test_backend_detection(tiny_exported, tmp_path):
    import shutil

    from router.manifest import ModelError
    from training.model import load_predictor

    model_dir, _manifest = tiny_exported
    assert load_predictor(model_dir).backend == "onnx"
    assert load_predictor(model_dir, variant="fp32").model_id.endswith("/fp32")
    with pytest.raises(ValueError, match="unknown backend"):
        load_predictor(model_dir, backend="tf")
    runtime_only = tmp_path / "runtime"
    shutil.copytree(model_dir, runtime_only, ignore=shutil.ignore_patterns("checkpoint"))
    with pytest.raises(ModelError, match="no SetFit checkpoint"):
        load_predictor(runtime_only, backend="torch")
    with pytest.raises(ModelError, match="neither a model directory"):
        load_predictor(tmp_path)


@pytest.mark.slow
def test_bare_checkpoint_uses_its_models_temperature(tiny_exported):
    from training.model import load_predictor

    model_dir, manifest = tiny_exported
    p = load_predictor(model_dir / "checkpoint")
    assert p.backend == "torch" and p.temperature == pytest.approx(manifest.calibration.temperature)
    assert p.model_id == f"{manifest.model_id}/torch"
    probs = p.predict_proba(["run the nightly backup now", "hi"])
    assert probs.shape == (2, 6) and np.allclose(probs.sum(axis=1), 1.0)


class _StubPredictor:
    """Fixed probabilities per text: the first four test messages fall below tau, two of them misclassified."""

    backend, variant, manifest, model_id = "onnx", None, None, "stub@0/none"
    labels = ("ACTION", "MEMORY", "OUT_OF_SCOPE", "PLANNING", "REASONING", "SEARCH")

    def __init__(self, rows):
        self.table = {}
        k = len(self.labels)
        for i, r in enumerate(rows):
            true = self.labels.index(r["label"])
            p = np.full(k, 0.05)
            if i < 4:  # below tau: right for 0 and 1, wrong for 2 and 3
                p[true if i < 2 else (true + 1) % k] = 0.6
                p[(true + 2) % k] = 0.2
            else:
                p[true] = 0.8
            self.table[r["text"]] = p / p.sum()

    def predict_proba(self, texts):
        return np.array([self.table[t] for t in texts])


def test_evaluation_with_a_verifier():
    rows = [json.loads(l) for l in (TINY / "test.jsonl").read_text().splitlines() if l.strip()]
    stub = _StubPredictor(rows)
    assert max(stub.table[rows[0]["text"]]) < 0.75 <= min(max(stub.table[r["text"]]) for r in rows[4:])
    oracle = _Oracle({r["text"]: r["label"] for r in rows[1:4]})  # fails on the first
    r = run_evaluation(
        None,
        TINY / "test.jsonl",
        predictor=stub,
        verifier=oracle,
        verifier_name="oracle",
        max_latency_samples=0,
    )
    _validate(r, load_schema())
    v = r["verifier"]
    assert v["verifier"] == "oracle" and (v["n_below"], v["answered"], v["failed"]) == (4, 3, 1)
    assert v["classifier_accuracy"] == 0.5 and v["verifier_accuracy"] == 0.75 and v["lift"] == 0.25
    assert v["end_to_end_accuracy"] == pytest.approx(11 / 12, abs=1e-6)  # 8 accepted + 3 verified right
    assert r["classification"]["accuracy"] == pytest.approx(10 / 12, abs=1e-6)
    assert r["thresholds"]["at_tau"]["accepted_share"] == pytest.approx(8 / 12, abs=1e-6)
    assert r["latency"] is None and r["model"]["path"] is None


def test_hub_class_labels_become_names(monkeypatch):
    import datasets

    import eval.data as data_mod

    features = datasets.Features(
        {"text": datasets.Value("string"), "intent": datasets.ClassLabel(names=["SEARCH", "ACTION"])}
    )
    table = datasets.Dataset.from_dict({"text": ["find it", "run it"], "intent": [0, 1]}, features=features)
    monkeypatch.setattr(data_mod, "_load_table", lambda source, split: (table, "hub", None, None))
    d = load_labeled("org/intents", label_column="intent", split="validation")
    assert (
        d.labels == ["SEARCH", "ACTION"]
        and d.format == "hub"
        and d.split == "validation"
        and d.where(1) == "row 2"
    )


def test_hub_name_offline_is_a_clear_error():
    import os

    if os.environ.get("HF_HUB_OFFLINE") != "1":
        pytest.skip("only checked offline (the default in tests)")
    with pytest.raises(DataError, match=r"not a local file.*Hub dataset.*HF_HUB_OFFLINE=0"):
        load_labeled("someone/some-intent-dataset")


@pytest.mark.slow
def test_evaluate_model_writes_the_report(tiny_exported, tmp_path):
    """The library function behind 'intent-router eval' (and build's last stage) writes the report."""
    from training.pipeline import evaluate_model

    model_dir, _ = tiny_exported
    out = tmp_path / "build-report"
    report = evaluate_model(model_dir, TINY / "test.jsonl", oos=TINY / "oos.jsonl", out=out)
    assert (out / "eval.json").is_file() and (out / "thresholds.png").is_file()
    assert report["model"]["backend"] == "onnx" and report["oos"]["n"] == 7
    write_baseline(report, tmp_path / "baseline.json")
    from typer.testing import CliRunner

    from cli import app

    r = CliRunner().invoke(
        app, ["gate", "--report", str(out / "eval.json"), "--baseline", str(tmp_path / "baseline.json")]
    )
    assert r.exit_code == 0, r.output


@pytest.mark.slow
def test_cli_eval_reports_data_errors(tiny_exported, tmp_path):
    from typer.testing import CliRunner

    from cli import app

    model_dir, _ = tiny_exported
    bad = _write(tmp_path / "bad.csv", "text,label\nfind the deck,WEATHER\n")
    r = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            str(model_dir),
            "--data",
            str(bad),
            "--out",
            str(tmp_path / "o"),
            "--max-latency-samples",
            "0",
        ],
    )
    assert r.exit_code == 1
    assert "unknown label 'WEATHER'" in r.output and "bad.csv" in r.output
