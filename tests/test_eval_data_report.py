"""The one loader's file errors, and the evaluator end to end: report schema, backends, CLI."""

import json

import numpy as np
import pytest

from eval.metrics.evaluator import run_evaluation
from eval.readers.loader import load_labeled, load_unlabeled
from eval.readers.sources import DataError
from eval.reports.gate import write_baseline
from eval.reports.report_files import load_report, load_schema, write_report
from tests.conftest import TINY
from tests.json_schema_check import mini_validate, validate_json
from tests.verifier_support import OracleVerifier


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
    known = ("SEARCH", "ACTION", "OUT_OF_SCOPE")  # a model's labels: WEATHER is not one of them
    with pytest.raises(DataError) as e:
        load_labeled(f, labels=known)
    msg = str(e.value)
    assert str(f) in msg and "3 invalid row(s)" in msg
    assert f"{at[0]}: unknown label 'WEATHER'" in msg and "\n" not in msg
    assert f"more invalid row(s): {at[1]}, {at[2]}" in msg
    assert e.value.problems[1:] == [
        f"{str(f) + ':3' if kind == 'jsonl' else str(f) + ': row 3'}: empty 'text'",
        f"{str(f) + ':4' if kind == 'jsonl' else str(f) + ': row 4'}: empty 'label'",
    ]
    d = load_labeled(f, labels=known, skip_invalid=True)
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
def test_the_mini_validator_catches_mistakes():
    schema = load_schema()
    with pytest.raises(AssertionError):
        mini_validate({"schema_version": 1}, schema, schema, "$")
    with pytest.raises(AssertionError):
        mini_validate(1.5, {"$ref": "#/$defs/share"}, schema, "$")
    with pytest.raises(AssertionError):
        mini_validate({"row": 1}, schema["properties"]["misclassified"]["items"], schema, "$")


@pytest.fixture(scope="module")
def onnx_report(tiny_exported):
    model_dir, _ = tiny_exported
    return run_evaluation(model_dir, TINY / "test.jsonl", oos=TINY / "oos.jsonl", max_latency_samples=20)


@pytest.mark.slow
def test_end_to_end_onnx_report(onnx_report, tiny_exported, tmp_path):
    _model_dir, manifest = tiny_exported
    r = onnx_report
    validate_json(r, load_schema())
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
    validate_json(r, load_schema())
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
    from training.measure.backends import load_predictor

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
    from training.measure.backends import load_predictor

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
    oracle = OracleVerifier({r["text"]: r["label"] for r in rows[1:4]})  # fails on the first
    r = run_evaluation(
        None,
        TINY / "test.jsonl",
        predictor=stub,
        verifier=oracle,
        verifier_name="oracle",
        max_latency_samples=0,
    )
    validate_json(r, load_schema())
    v = r["verifier"]
    assert v["verifier"] == "oracle" and (v["n_below"], v["answered"], v["failed"]) == (4, 3, 1)
    assert v["classifier_accuracy"] == 0.5 and v["verifier_accuracy"] == 0.75 and v["lift"] == 0.25
    assert v["end_to_end_accuracy"] == pytest.approx(11 / 12, abs=1e-6)  # 8 accepted + 3 verified right
    assert r["classification"]["accuracy"] == pytest.approx(10 / 12, abs=1e-6)
    assert r["thresholds"]["at_tau"]["accepted_share"] == pytest.approx(8 / 12, abs=1e-6)
    assert r["latency"] is None and r["model"]["path"] is None


def test_hub_class_labels_become_names(monkeypatch):
    import datasets

    import eval.readers.loader as data_mod

    features = datasets.Features(
        {"text": datasets.Value("string"), "intent": datasets.ClassLabel(names=["SEARCH", "ACTION"])}
    )
    table = datasets.Dataset.from_dict({"text": ["find it", "run it"], "intent": [0, 1]}, features=features)
    monkeypatch.setattr(data_mod, "load_table", lambda source, split: (table, "hub", None, None))
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
