"""Benchmark readers, k-shot sampling and the runner, on tiny fixture files (never on ../shared)."""

import json

import numpy as np
import pytest

from eval.metrics.thresholds import choose_threshold
from eval.metrics.thresholds import in_scope_at_threshold as at_tau
from tests.conftest import FIXTURES
from training.benchmarks.public_data import (
    BenchmarkDataError,
    Split,
    k_shot,
    read_banking77,
    read_benchmark,
    read_clinc150,
)

BENCH = FIXTURES / "benchmarks"
CLINC = BENCH / "clinc150"
BANKING = BENCH / "banking77"


def test_read_clinc150_splits_and_oos():
    for path in (CLINC, CLINC / "data_full.json"):  # the folder or the file itself
        s = read_clinc150(path)
        assert set(s) == {"train", "val", "test", "oos_train", "oos_val", "oos_test"}
        assert {k: len(v) for k, v in s.items()} == {
            "train": 12,
            "val": 6,
            "test": 6,
            "oos_train": 2,
            "oos_val": 2,
            "oos_test": 3,
        }
        assert s["train"].classes == ["alarm", "play_music", "weather"]
        assert s["train"].texts[0] == "what's the weather like today" and s["train"].labels[0] == "weather"
        assert set(s["oos_test"].labels) == {"oos"}


def test_read_clinc150_errors(tmp_path):
    with pytest.raises(BenchmarkDataError, match="not found"):
        read_clinc150(tmp_path)
    bad = tmp_path / "data_full.json"
    bad.write_text(json.dumps({"train": [], "val": [], "test": []}))
    with pytest.raises(BenchmarkDataError, match="missing key"):
        read_clinc150(bad)
    bad.write_text(
        json.dumps(
            {k: [] for k in ("val", "test", "oos_train", "oos_val", "oos_test")} | {"train": [["only text"]]}
        )
    )
    with pytest.raises(BenchmarkDataError, match=r"train\[0\]"):
        read_clinc150(bad)


def test_read_banking77_quoted_fields_span_lines():
    s = read_banking77(BANKING)
    assert set(s) == {"train", "test"}
    assert len(s["train"]) == 12 and len(s["test"]) == 6  # a line-based reader would see more rows
    assert s["train"].classes == ["card_arrival", "exchange_rate", "pin_blocked"]
    multi = [t for t in s["train"].texts if "\n" in t]
    assert multi == ["I put the wrong PIN too many times and now it is blocked.\nCan you help me unblock it?"]
    assert 'it says "blocked"' in s["train"].texts[7]
    assert s["train"].texts[2] == "My card hasn't come yet, what should I do?"
    assert (
        s["test"].texts[2] == "My PIN got locked\nafter too many tries"
        and s["test"].labels[2] == "pin_blocked"
    )


def test_read_banking77_errors(tmp_path):
    with pytest.raises(BenchmarkDataError, match=r"train.csv"):
        read_banking77(tmp_path)
    (tmp_path / "train.csv").write_text("sentence,intent\nhello,greet\n")
    (tmp_path / "test.csv").write_text("text,category\nhello,greet\n")
    with pytest.raises(BenchmarkDataError, match="header"):
        read_banking77(tmp_path)
    with pytest.raises(ValueError, match="unknown benchmark"):
        read_benchmark("snips", tmp_path)


def test_k_shot_is_deterministic_and_balanced():
    train = read_clinc150(CLINC)["train"]
    a, b = k_shot(train, 2, seed=0), k_shot(train, 2, seed=0)
    assert a.texts == b.texts and a.labels == b.labels
    assert sorted(a.labels) == sorted(["alarm", "play_music", "weather"] * 2)
    assert set(a.texts) <= set(train.texts)
    order = [train.texts.index(t) for t in a.texts]
    assert order == sorted(order)  # file order kept
    samples = {tuple(k_shot(train, 2, seed=s).texts) for s in range(6)}
    assert len(samples) > 1  # seeds change the draw
    # the draw does not depend on the order of rows in the file
    rev = Split(train.texts[::-1], train.labels[::-1])
    assert sorted(k_shot(rev, 4, seed=3).texts) == sorted(train.texts)
    with pytest.raises(ValueError, match="fewer than k=5"):
        k_shot(train, 5, seed=0)


def test_threshold_is_chosen_on_val_and_applied():
    conf_in = np.array([0.9, 0.8, 0.7, 0.4])
    correct = np.array([True, True, False, True])
    conf_oos = np.array([0.3, 0.5])
    t = choose_threshold(conf_in, correct, conf_oos)
    # tau between 0.5 and 0.7 accepts 3 of 4 in-scope (2 of them right) and catches both out-of-scope ones
    assert 0.5 < t["tau"] < 0.7
    assert t["val_in_scope_accuracy"] == 0.5 and t["val_oos_recall"] == 1.0
    r = at_tau(conf_in, correct, conf_oos, t["tau"])
    assert r == {"in_scope_accuracy": 0.5, "in_scope_accepted_share": 0.75, "oos_recall": 1.0}
    assert at_tau(conf_in, correct, conf_oos, 0.0)["oos_recall"] == 0.0


def test_pooled_threshold_weighs_by_counts():
    # 8 right in-scope answers (4 unsure at 0.4, 4 sure at 0.9) and 2 out-of-scope at 0.5 and 0.6:
    # balanced gives up the unsure half to catch both out-of-scope messages, pooled (plain accuracy over
    # all 10) keeps every in-scope answer and catches none
    conf_in, correct = np.array([0.4] * 4 + [0.9] * 4), np.ones(8, dtype=bool)
    conf_oos = np.array([0.5, 0.6])
    bal = choose_threshold(conf_in, correct, conf_oos, "balanced")
    pool = choose_threshold(conf_in, correct, conf_oos, "pooled")
    assert 0.6 < bal["tau"] < 0.9 and bal["val_in_scope_accuracy"] == 0.5 and bal["val_oos_recall"] == 1.0
    assert pool["tau"] < 0.4 and pool["val_in_scope_accuracy"] == 1.0 and pool["val_oos_recall"] == 0.0
    assert bal["val_score"] == 0.75 and pool["val_score"] == 0.8
    with pytest.raises(ValueError, match="criterion"):
        choose_threshold(conf_in, correct, conf_oos, "f1")


@pytest.mark.slow
def test_run_benchmark_tiny_clinc(tmp_path):
    """Two seeds of 2-shot training for 4 contrastive steps on the fixture (about 20 s on 2 cores)."""
    from training.benchmarks.runner import format_summary, run_benchmark

    out = tmp_path / "res.json"
    res = run_benchmark(
        "clinc150",
        CLINC,
        shots=2,
        seeds=2,
        max_steps=4,
        batch_size=8,
        report=lambda _: None,
        out=out,
        command="intent-router bench dataset ...",
    )
    assert res["complete"] and [r["seed"] for r in res["runs"]] == [0, 1]
    saved = json.loads(out.read_text())  # written by the library (after each seed, and at the end)
    assert saved["complete"] and saved["command"].startswith("intent-router") and len(saved["runs"]) == 2
    assert res["hyperparameters"]["max_steps"] == 4 and res["data"]["rows"]["oos_test"] == 3
    for r in res["runs"]:
        assert r["train_rows"] == 6 and r["temperature"] > 0
        assert 0 <= r["test"]["accuracy"] <= 1 and r["test"]["n"] == 6
        assert 0 <= r["oos"]["test_oos_recall"] <= 1 and r["oos"]["n_test"] == 3
        assert 0 <= r["oos_pooled"]["test_oos_recall"] <= 1
    s = res["summary"]
    assert s["accuracy"]["n"] == 2 and s["accuracy"]["min"] <= s["accuracy"]["mean"] <= s["accuracy"]["max"]
    assert "oos_recall" in s and any(m.startswith("out-of-scope") for m, _ in format_summary(res))
    json.dumps(res)  # serialisable as is


@pytest.mark.slow
def test_run_benchmark_clinc_oos_class(tmp_path):
    """CLINC150 with oos_train as an extra class, plus the in-scope distance, on the fixture."""
    from training.benchmarks.runner import format_summary, run_benchmark

    res = run_benchmark(
        "clinc150", CLINC, shots=2, seeds=1, max_steps=4, batch_size=8, report=lambda _: None, oos_class=True
    )
    run = res["runs"][0]
    assert res["oos_class"] and "oos" not in run  # no confidence threshold in the extra-class protocol
    assert run["train_rows"] == 6 + res["data"]["rows"]["oos_train"]
    o = run["oos_class"]
    assert o["n_oos_test"] == 3 and 0 <= o["extra_class"]["oos_recall"] <= 1
    wd = o["with_distance"]
    # the distance can only add out-of-scope calls: recall up, in-scope accuracy down, never the reverse
    assert wd["oos_recall"] >= o["extra_class"]["oos_recall"]
    assert wd["in_scope_accuracy"] <= o["extra_class"]["in_scope_accuracy"]
    assert any(m.startswith("extra class + distance") for m, _ in format_summary(res))
    # the operating points: a lower keep can only flag more, on val and on test
    pts = o["operating_points"]
    for split in ("val", "test"):
        recall = [p[split]["oos_recall"] for p in pts["curve"]]
        in_scope = [p[split]["in_scope_accuracy"] for p in pts["curve"]]
        assert recall == sorted(recall) and in_scope == sorted(in_scope, reverse=True)
    chosen = pts["chosen_on_val"]  # fixture val: chosen there, meeting the floor there
    assert chosen is None or chosen["val"]["in_scope_accuracy"] >= pts["in_scope_floor"] == 0.92
    loose = run_benchmark(
        *("clinc150", CLINC),
        **dict(shots=2, seeds=1, max_steps=4, batch_size=8, report=lambda _: None, oos_class=True),
        in_scope_floor=0.0,
    )
    best = loose["runs"][0]["oos_class"]["operating_points"]["chosen_on_val"]
    assert best["val"]["oos_recall"] >= max(p["val"]["oos_recall"] for p in pts["curve"])
    assert any(m.startswith("operating point") for m, _ in format_summary(loose))
    with pytest.raises(ValueError, match="oos_class"):
        run_benchmark("banking77", CLINC, oos_class=True, report=lambda _: None)
