"""The speed benchmark (eval/bench/speed.py): its goals, timed rows, comparison and goal lines."""

import pytest

from tests.conftest import SHIPPED

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def test_speed_goals_are_checked_both_ways():
    from eval.bench.speed import check_goals

    row = {"p50_ms": 0.9, "p99_ms": 2.5, "speedup_p50_vs_setfit": 9.0, "batch_msgs_per_s": 1400.0}
    assert check_goals(row) == {
        "p50_ms": True,
        "p99_ms": False,
        "speedup_p50_vs_setfit": True,
        "batch_msgs_per_s": False,
    }


@pytest.mark.slow
def test_the_speed_benchmark_counts_the_calls_that_ran_the_graph_twice(tiny_exported):
    """Both shipped models read clauses in their one run; the tiny model, built without a clause reader,
    reads a possible two-intent message's clauses in a second run, and the benchmark counts those calls."""
    from eval.bench.speed import bench_router, table_rows
    from router import Router

    assert (
        bench_router(SHIPPED, ["find the Q3 deck and email it to Maria"], warmup=1)["read_twice_share"] == 0
    )
    model, manifest = tiny_exported
    assert manifest.compound is not None and manifest.compound.reader is None
    texts = [
        "find the Q3 board deck and email it to Maria before noon",
        "pull the signed MSA for Acme, then summarise the termination clauses for me",
        "what did we decide about the offsite budget last time",
        "book a meeting room for friday 3pm",
        "hi there",
        "plan the migration of our CI runners to arm64",
    ]
    row = bench_router(model, texts, warmup=1)
    twice = [bool(c.clauses) for c in Router.load(model).classifier.classify_batch(texts)]
    assert 0 < sum(twice) < len(texts)  # the texts hold both kinds
    assert row["read_twice_share"] == pytest.approx(sum(twice) / len(texts))
    assert row["p99_ms_one_run"] > 0
    header, rows = table_rows({"rows": [row]})
    assert rows[0][header.index("2 runs")] == f"{sum(twice) / len(texts):.1%}"


def test_the_speed_benchmark_times_a_second_model_in_the_same_rounds():
    """Each model is timed through its own default graph, in interleaved rounds."""
    from eval.bench.speed import comparison_lines, run_speed_benchmark
    from router.manifest import load_manifest
    from tests.conftest import FAST

    texts = ["find the Q3 board deck and email it to Maria", "book a meeting room for friday 3pm", "hi"]
    said = []
    default, fast_default = (load_manifest(m).export.default_variant for m in (SHIPPED, FAST))
    res = run_speed_benchmark(SHIPPED, texts, variants=(default,), runs=2, compare=[FAST], report=said.append)
    assert [r["name"] for r in res["rows"]] == [
        f"router onnx {default}",
        f"router onnx {fast_default}: intent-minilm-fast",
    ]
    assert res["rows"][1]["model"] == load_manifest(FAST).model_id and res["rows"][1]["runs"] == 2
    assert said.index(f"run 1/2: router onnx of {FAST} (its default graph) ...") < said.index(
        f"run 2/2: router onnx {default} ..."
    )  # interleaved, not one model after the other
    (line,) = comparison_lines(res)
    main, fast = res["rows"]
    assert line.startswith(
        f"intent-minilm-fast against {res['model']}: p50 {main['p50_ms'] / fast['p50_ms']:.2f}x"
    )
    with pytest.raises(Exception, match="model directory not found"):  # before any timing
        run_speed_benchmark(SHIPPED, texts, variants=(default,), runs=1, compare=[FAST / "missing"])


def test_a_compared_model_is_measured_against_the_default_graph_whatever_its_variant():
    """A model whose default graph is fp16 is compared through that graph's row, not an int8 one."""
    from eval.bench.speed import comparison_lines

    fp16 = {"name": "router onnx fp16", "p50_ms": 4.0, "p99_ms": 8.0, "batch_msgs_per_s": 200.0}
    other = {"name": "router onnx int8: fast", "p50_ms": 2.0, "p99_ms": 4.0, "batch_msgs_per_s": 500.0}
    result = {"model": "m@1", "default_variant": "fp16", "rows": [fp16, other]}
    assert comparison_lines(result) == ["fast against m@1: p50 2.00x, p99 2.00x, batches 2.50x (> 1: faster)"]
    assert comparison_lines({**result, "default_variant": "int8"}) == []  # no row of that graph: no line


def test_the_speed_benchmark_says_when_fp32_beats_int8_on_this_cpu():
    from eval.bench.speed import comparison_lines

    int8 = {"name": "router onnx int8", "p50_ms": 3.9, "p99_ms": 6.0, "batch_msgs_per_s": 240.0}
    fp32 = {"name": "router onnx fp32", "p50_ms": 3.4, "p99_ms": 5.0, "batch_msgs_per_s": 350.0}
    result = {"model": "m@1", "machine": {"cpu": "x86_64 avx2"}, "rows": [int8, fp32]}
    (line,) = comparison_lines(result)
    assert line == (
        "int8 against fp32 on x86_64 avx2: p50 0.87x, batches 0.69x (> 1: int8 faster); "
        "fp32 is faster here: Router.load(..., variant='fp32')"
    )
    faster = {**int8, "p50_ms": 1.7, "batch_msgs_per_s": 700.0}
    (line,) = comparison_lines({**result, "rows": [faster, fp32]})
    assert line.endswith("p50 2.00x, batches 2.00x (> 1: int8 faster)")


def test_goal_lines_say_which_of_the_speed_goals_each_router_meets():
    from eval.bench.speed import check_goals, goal_lines

    main = {"name": "router onnx int8", "p50_ms": 0.7, "p99_ms": 2.2, "batch_msgs_per_s": 1600.0}
    main.update(router_overhead_ms=0.08, speedup_p50_vs_setfit=7.5)
    other = {**main, "name": "router onnx int8: other", "model": "other@1", "speedup_p50_vs_setfit": 9.0}
    torch_row = {"name": "setfit pytorch predict_proba", "p50_ms": 5.2}
    for r in (main, other):
        r["goals"] = check_goals(r)
    lines = goal_lines({"model": "main@1", "rows": [main, other, torch_row]})
    assert len(lines) == 2  # the PyTorch row has no goals
    assert lines[0] == (
        "router onnx int8, speed goals: p50 0.70 ms (<= 1.00: met), p99 2.20 ms (<= 2.00: missed), "
        "p50 vs PyTorch 7.5x (>= 8.0: missed), batches 1,600 msg/s (>= 1,500: met), "
        "overhead 0.080 ms (<= 0.100: met)"
    )
    assert "p50 vs main@1's PyTorch 9.0x (>= 8.0: met)" in lines[1]  # a compared model names the reference
