import json

import pytest
from typer.testing import CliRunner

from cli import app
from tests.conftest import FIXTURES, SHIPPED

runner = CliRunner()


def test_data_check_ok_and_failing_files():
    ok = runner.invoke(app, ["data", "check", str(FIXTURES / "tiny"), "--strict"])
    assert ok.exit_code == 0, ok.output
    assert "0 error(s)" in ok.output and "Class balance" in ok.output
    assert "(strict: warnings count as errors)" in ok.output  # why a warning alone fails the check
    bad = runner.invoke(app, ["data", "check", str(FIXTURES / "bad" / "train.jsonl")])
    assert bad.exit_code == 1
    assert "train.jsonl:2: invalid JSON" in bad.output.replace("\n", "")
    leaky = runner.invoke(app, ["data", "check", str(FIXTURES / "leaky"), "--json"])
    assert leaky.exit_code == 1
    report = json.loads(leaky.output)
    assert sum(e["message"].startswith("leak") for e in report["errors"]) == 4


@pytest.mark.slow
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


@pytest.mark.slow
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


SHIPPED_MODEL = ["--model", str(SHIPPED)]  # as committed (tests/shipped_models.py)


def _one_error_line(res, *needles):
    assert res.exit_code != 0, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    text = res.output.strip()
    assert "Traceback" not in text and len(text.splitlines()) == 1, text
    for n in needles:
        assert n in text, text


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        (b'{"text": "find the deck"}\n{"text": 123}\n', [":2:", "'text' must be a string, got int"]),
        (b'{"text": "find the deck"}\n{"text": null}\n', [":2:", "missing 'text'"]),
        (b'{"text": "find the deck"}\n{"message": "hi"}\n', [":2:", "missing 'text'"]),
        (b'{"text": "ok"}\n{"text": "caf\xe9"}\n', [":2:", "not valid UTF-8"]),
        (b'{"text": "ok"}\nnot json\n', [":2:", "invalid JSON"]),
    ],
)
def test_route_file_errors_are_one_line(tmp_path, content, needles):
    f = tmp_path / "msgs.jsonl"
    f.write_bytes(content)
    _one_error_line(runner.invoke(app, ["route", "--file", str(f), *SHIPPED_MODEL]), str(f), *needles)
    # the same rows on stdin are JSONL too: a row without "text" is an error, not a message
    if b"\xe9" not in content and b"not json" not in content:
        res = runner.invoke(app, ["route", "--file", "-", *SHIPPED_MODEL], input=content.decode())
        _one_error_line(res, "<stdin>")


def test_route_missing_file_and_plain_lines(tmp_path):
    _one_error_line(
        runner.invoke(app, ["route", "--file", str(tmp_path / "nope.txt"), *SHIPPED_MODEL]), "file not found"
    )
    f = tmp_path / "msgs.txt"
    f.write_text("find the vpn guide\n\n{not a json row, but a message\n", encoding="utf-8")
    res = runner.invoke(app, ["route", "--file", str(f), *SHIPPED_MODEL])
    assert res.exit_code == 0, res.output
    assert len(res.output.strip().splitlines()) == 2


def test_unexpected_errors_are_one_line_unless_debug(tmp_path):
    bad = tmp_path / "model"
    bad.mkdir()
    (bad / "manifest.json").write_text("{not json")
    res = runner.invoke(app, ["route", "hello", "--model", str(bad)])
    _one_error_line(res)
    res = runner.invoke(app, ["--debug", "route", "hello", "--model", str(bad)])
    assert res.exit_code != 0 and res.exception is not None and not isinstance(res.exception, SystemExit)


def test_config_check_prints_effective_permissions_and_refuses_duplicates(tmp_path):
    ok = runner.invoke(app, ["config", "check"])
    assert ok.exit_code == 0, ok.output
    assert "role viewer:" in ok.output and "- action:" in ok.output  # viewers are denied the action skill
    as_json = runner.invoke(app, ["config", "check", "--json"])
    assert json.loads(as_json.output)["roles"]["admin"]["action"]["requires_confirmation"] is True
    dup = tmp_path / "dup.yaml"
    dup.write_text("threshold: 0.75\nthreshold: 0.5\n", encoding="utf-8")
    bad = runner.invoke(app, ["config", "check", str(dup)])
    assert bad.exit_code == 1
    assert "dup.yaml:2: duplicate key 'threshold'" in bad.output.replace("\n", "")
    assert "Traceback" not in bad.output


def test_data_check_covers_the_compound_corpus(tmp_path):
    real = runner.invoke(app, ["data", "check", str(FIXTURES.parent.parent / "data"), "--strict"])
    assert real.exit_code == 0, real.output
    assert "Compound requests" in real.output and "compound/test" in real.output
    compound = tmp_path / "data" / "compound"
    compound.mkdir(parents=True)
    (tmp_path / "data" / "train.jsonl").write_text('{"text": "pull up the q3 deck", "label": "SEARCH"}\n')
    row = {"text": "Pull up the Q3 deck", "labels": ["ACTION", "SEARCH"], "pair_kind": "SEARCH+ACTION"}
    (compound / "dev.jsonl").write_text(json.dumps(row) + "\n")
    leaky = runner.invoke(app, ["data", "check", str(tmp_path / "data"), "--json"])
    assert leaky.exit_code == 1
    report = json.loads(leaky.output)
    messages = [e["message"] for e in report["errors"]]
    assert sum(m.startswith("leak:") for m in messages) == 1
    # the train split (one SEARCH row) is the label set: ACTION is not in it, and one row is too few
    assert "label 'ACTION' is not a label of the train split (SEARCH)" in messages
    assert "label 'SEARCH' has 1 train row(s); write at least 4" in messages
    assert report["compound"]["compound/dev"]["SEARCH+ACTION"] == 1


def test_route_prints_one_json_line_with_a_numeric_confidence():
    """The one-line view is JSON a pipe can read: never wrapped at the terminal's width, the confidence a
    number."""
    long = "please find the onboarding checklist for new engineers in the platform team's wiki space " * 2
    out = runner.invoke(app, ["route", long.strip()])
    assert out.exit_code == 0, out.output
    brief = json.loads(out.output.splitlines()[0])
    assert isinstance(brief["confidence"], float) and 0 < brief["confidence"] <= 1
    assert brief["intent"] == "SEARCH"


def test_data_check_reads_csv_tsv_and_parquet_as_it_reads_jsonl(tmp_path):
    """The tiny corpus's train, dev and test splits as CSV, TSV and Parquet: the same rows, the same
    tables; a leak is caught across formats; a folder with no data file is an error, not "0 file(s)"."""
    import csv

    import pyarrow as pa
    import pyarrow.parquet as pq

    def rows(name):
        return [json.loads(line) for line in (FIXTURES / "tiny" / f"{name}.jsonl").open()]

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    with (corpus / "train.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["text", "label"])
        w.writeheader()
        w.writerows(rows("train"))
    with (corpus / "dev.tsv").open("w", newline="") as f:
        w = csv.DictWriter(f, ["text", "label"], delimiter="\t")
        w.writeheader()
        w.writerows(rows("dev"))
    pq.write_table(pa.Table.from_pylist(rows("test")), corpus / "test.parquet")
    out = runner.invoke(app, ["data", "check", str(corpus), "--json"])
    report = json.loads(out.output)
    assert out.exit_code == 0 and not report["errors"], report["errors"]
    splits = [str(FIXTURES / "tiny" / f"{s}.jsonl") for s in ("train", "dev", "test")]
    jsonl = json.loads(runner.invoke(app, ["data", "check", *splits, "--json"]).output)
    assert len(report["files"]) == 3
    assert (
        report["class_balance"] == jsonl["class_balance"] and report["length_stats"] == jsonl["length_stats"]
    )
    leak = rows("dev")[0]
    with (corpus / "train.csv").open("a", newline="") as f:
        csv.DictWriter(f, ["text", "label"]).writerow(leak)
    leaky = json.loads(runner.invoke(app, ["data", "check", str(corpus), "--json"]).output)
    assert any(e["message"].startswith("leak") for e in leaky["errors"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not data\n")
    none = runner.invoke(app, ["data", "check", str(tmp_path / "empty")])
    assert none.exit_code == 1 and "no data files" in none.output
