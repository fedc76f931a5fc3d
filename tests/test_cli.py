import json

from typer.testing import CliRunner

from cli import app
from tests.conftest import FIXTURES

runner = CliRunner()


def test_data_check_ok_and_failing_files():
    ok = runner.invoke(app, ["data", "check", str(FIXTURES / "tiny"), "--strict"])
    assert ok.exit_code == 0, ok.output
    assert "0 error(s)" in ok.output and "Class balance" in ok.output
    bad = runner.invoke(app, ["data", "check", str(FIXTURES / "bad" / "train.jsonl")])
    assert bad.exit_code == 1
    assert "train.jsonl:2: invalid JSON" in bad.output.replace("\n", "")
    leaky = runner.invoke(app, ["data", "check", str(FIXTURES / "leaky"), "--json"])
    assert leaky.exit_code == 1
    report = json.loads(leaky.output)
    assert sum(e["message"].startswith("leak") for e in report["errors"]) == 4


def test_route_json_and_stdin_batch(tiny_exported):
    model_dir, _ = tiny_exported
    one = runner.invoke(
        app, ["route", "restart the staging cluster", "--role", "admin", "--model", str(model_dir), "--json"]
    )
    assert one.exit_code == 0, one.output
    d = json.loads(one.output)
    assert d["role"] == "admin" and d["source"] in ("classifier", "fallback") and "latency" in d
    many = runner.invoke(
        app,
        ["route", "--file", "-", "--role", "viewer", "--model", str(model_dir)],
        input='find the vpn guide\n{"text": "book a room for friday"}\n???\n',
    )
    assert many.exit_code == 0, many.output
    lines = [json.loads(l) for l in many.output.strip().splitlines()]
    assert len(lines) == 3 and lines[2]["source"] == "guardrail"


def test_route_errors_are_clear(tiny_exported, tmp_path):
    model_dir, _ = tiny_exported
    bad = runner.invoke(app, ["route", "hello", "--model", str(model_dir), "--threshold", "1.5"])
    assert bad.exit_code == 1 and "threshold must be in (0, 1]" in bad.output
    missing = runner.invoke(app, ["route", "hello", "--model", str(tmp_path / "nope")])
    assert missing.exit_code == 1 and "model directory not found" in missing.output
    empty = runner.invoke(app, ["route", "--model", str(model_dir)])
    assert empty.exit_code == 2


def test_train_rejects_bad_config(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("max_steps: 5\nlearning_rate_typo: 1\n")
    res = runner.invoke(app, ["train", "--config", str(cfg), "--out", str(tmp_path / "m")])
    assert res.exit_code == 1 and "learning_rate_typo" in res.output
    res = runner.invoke(
        app, ["train", "--train-file", str(FIXTURES / "bad" / "train.jsonl"), "--out", str(tmp_path / "m")]
    )
    assert res.exit_code == 1 and "invalid JSON" in res.output
