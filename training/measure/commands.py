"""Commands that measure any model, exported or a SetFit checkpoint (training.measure.backends opens
it): eval, and bench speed (the ONNX router beside SetFit in PyTorch)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from eval.reports.summary import print_eval_summary
from router.console import (
    Opt,
    RouterConfigFile,
    TextColumn,
    app,
    bench_app,
    command,
    console,
    fail,
    make_verifier,
    say,
    table,
    tools_app,
)


@app.command("eval")
@command()
def evaluate(
    data: str = Opt(..., help="Labeled JSONL/CSV/TSV/Parquet file, or a Hub dataset name (online only)."),
    model: Annotated[
        Path | None,
        Opt(
            help="Exported model dir, training output dir or bare SetFit checkpoint (default: the shipped model)."
        ),
    ] = None,
    oos: str | None = Opt(None, help="Unlabeled out-of-scope file for out-of-scope recall."),
    compound: str | None = Opt(
        None, help="Compound-request file (data/compound/): two-intent rows and twins, scored apart."
    ),
    conversations: str | None = Opt(
        None,
        help="Conversation file (data/conversations/): routed turn by turn, each turn after the one before.",
    ),
    tools: Path | None = Opt(
        None, help="Tool registry: with --tool-data, score the tools each message gets."
    ),
    tool_data: Path | None = Opt(
        None, help="Requests and the registry's tools each needs (data/tools/): the tools section."
    ),
    out: Path = Opt(Path("reports/eval"), help="Directory for eval.json, report.md and the PNG plots."),
    config: RouterConfigFile = None,
    threshold: Annotated[float | None, Opt(help="tau (default: the router config's, 0.75).")] = None,
    variant: str | None = Opt(None, help="ONNX graph: int8 (default), fp16 or fp32."),
    text_column: TextColumn = "text",
    label_column: Annotated[str, Opt(help="Column holding the intent label.")] = "label",
    backend: str = Opt("auto", help="auto (onnx when exported), onnx or torch."),
    split: str | None = Opt(None, help="Split of a Hub dataset (default: test)."),
    skip_invalid: bool = Opt(
        False, "--skip-invalid", help="Leave out (and list) invalid rows instead of stopping."
    ),
    verifier_url: Annotated[
        str | None, Opt(help="OpenAI-compatible base URL: report the verifier lift below tau.")
    ] = None,
    verifier_model: Annotated[str | None, Opt(help="Model name for the verifier.")] = None,
    verifier_max: int | None = Opt(None, help="Verify at most this many below-tau messages."),
    max_latency_samples: int = Opt(300, help="Messages timed one by one (0: skip latency)."),
    fit_thresholds: bool = Opt(
        False,
        "--fit-thresholds",
        help="Fit each intent's threshold on DATA (use dev) for --target-precision.",
    ),
    target_precision: float = Opt(0.95, min=0.01, max=1.0, help="Precision of accepted messages to fit for."),
    write_config: Path | None = Opt(
        None, help="With --fit-thresholds: the router config to write (default: OUT/router.thresholds.yaml)."
    ),
) -> dict:
    """Evaluate a model: metrics, calibration, threshold sweep, out-of-scope recall, compound requests, latency; write the report."""
    options = {
        k: v
        for k, v in locals().items()
        if not k.startswith("verifier_")
        and k not in ("model", "data", "fit_thresholds", "target_precision", "write_config")
    }
    options["fit_thresholds"] = target_precision if fit_thresholds else None
    if (tools is None) != (tool_data is None):
        raise fail("--tools and --tool-data go together: the registry and its requests", code=2)
    from training.pipeline import evaluate_model  # after locals() is read

    verifier = make_verifier(verifier_url, verifier_model, None, config)
    name = f"{verifier_model or 'default'} @ {verifier_url}" if verifier else None
    report = evaluate_model(
        model, data, verifier=verifier, verifier_max=verifier_max, verifier_name=name, **options
    )
    print_eval_summary(report)
    console.print(f"report written to [bold]{out}[/] (eval.json, report.md, PNG plots)")
    if fit_thresholds:
        from eval.metrics.intent_thresholds import markdown_lines, write_config_with_thresholds

        for line in markdown_lines(report["intent_thresholds"]):
            console.print(line, highlight=False)
        path = write_config_with_thresholds(
            config, report["intent_thresholds"], write_config or out / "router.thresholds.yaml"
        )
        console.print(f"router config with these thresholds written to [bold]{path}[/]")
    return report


@bench_app.command("speed")
@command()
def bench_speed(
    model: Annotated[
        Path | None,
        Opt(help="Model directory (default: the shipped model)."),
    ] = None,
    data: Path = Opt(Path("data/test.jsonl"), help="JSONL messages to time."),
    limit: int = Opt(500, help="How many messages."),
    torch: bool = Opt(True, "--torch/--no-torch", help="Include SetFit PyTorch predict_proba."),
    reference: Path | None = Opt(
        None,
        help="Model whose SetFit PyTorch is timed (default: --model): its checkpoint/, else the model read "
        "back from its graph. The fast model cannot be read back: name the default model.",
    ),
    batch_size: int = Opt(64),
    threads: int | None = Opt(None, help="onnxruntime intra-op threads (default: all cores)."),
    out: Path | None = Opt(None, help="Also write the results as JSON."),
    runs: int = Opt(3, help="Interleaved runs; every figure is their median (spread in the JSON)."),
    compare: list[Path] = Opt(
        [], help="Another model directory whose int8 router runs in the same rounds (repeatable)."
    ),
) -> None:
    """Latency, throughput, load time and memory: ONNX int8 and fp32 routers beside SetFit PyTorch."""
    from eval.bench.speed import comparison_lines, goal_lines, table_rows
    from training.pipeline import speed_benchmark

    res = speed_benchmark(
        model,
        data,
        limit=limit,
        include_torch=torch,
        reference=reference,
        batch_size=batch_size,
        threads=threads,
        out=out,
        report=say,
        runs=runs,
        compare=compare,
    )
    table(f"{res['model']}: {res['messages']} messages, {res['machine']['cpus']} CPUs", *table_rows(res))
    for line in comparison_lines(res) + goal_lines(res):
        console.print(line)
    if out:
        console.print(f"wrote {out}")


@tools_app.command("calibrate")
@command()
def tools_calibrate(
    data: Path = typer.Argument(
        ..., help="Requests and the tools each needs, a dev split (data/tools/dev.jsonl)."
    ),
    registry: Annotated[Path, Opt("--registry", help="Tool registry YAML.")] = Path("tools.yaml"),
    model: Annotated[Path | None, Opt(help="Exported model dir (default: the shipped model).")] = None,
    config: RouterConfigFile = None,
    max_recall_loss: float = Opt(
        0.01, min=0.0, max=1.0, help="Routed tool recall@k the floor may cost, against no floor."
    ),
    write_config: Path = Opt(
        Path("router.tools.yaml"), help="The router config to write, with the fitted tool_search.min_score."
    ),
) -> None:
    """Fit the tool search's "none applies" floor (tool_search.min_score) on a dev split: of the floors at which
    routed recall@k stays within --max-recall-loss of no floor, the one whose "none applies" has the best F1.
    Writes the router config with it."""
    from eval.metrics.tool_selection import fit_tool_floor, load_tool_rows
    from router.config import RouterConfig
    from router.routing import Router
    from router.shipped import default_model_dir

    cfg = RouterConfig.load(config)
    zero = cfg.model_copy(update={"tool_search": cfg.tool_search.model_copy(update={"min_score": 0.0})})
    router = Router.load(model or default_model_dir(), zero, tools=registry)
    fit = fit_tool_floor(router, load_tool_rows(data, set(router.tools.named)), max_recall_loss)
    rows = [
        [
            name,
            f"{r['floor']:g}",
            _pct(r["recall_at_k"]),
            str(r["none_applies_said"]),
            _pct(r["none_applies_precision"]),
            _pct(r["none_applies_recall"]),
        ]
        for name, r in (("no floor", fit["no_floor"]), ("fitted", fit["at_floor"]))
    ]
    table(f"none applies on {data}", ["", "min_score", "recall@k", "none said", "precision", "recall"], rows)
    spec = cfg.tool_search.model_copy(update={"min_score": fit["min_score"]})
    path = cfg.model_copy(update={"tool_search": spec}).save(write_config)
    say(f"router config with tool_search.min_score {fit['min_score']:g} written to {path}")


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.1%}"
