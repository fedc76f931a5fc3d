"""intent-router command line: parses arguments, calls one library function, prints the result.

The work lives in router/ (routing), training/ (training, export, the build pipeline, benchmarks) and
eval/ (the evaluator, reports, gates). Every error is one line and a non-zero exit; ``--debug`` shows
the traceback, ``--verbose`` lets third-party libraries log at INFO.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
from pathlib import Path

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

Opt = typer.Option
app = typer.Typer(
    help="Train, export, evaluate and run the five-intent router.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Corpus tools.", no_args_is_help=True)
app.add_typer(data_app, name="data")
bench_app = typer.Typer(help="Benchmarks: speed, public intent datasets.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")
config_app = typer.Typer(help="Router config tools.", no_args_is_help=True)
app.add_typer(config_app, name="config")

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 400)
THIRD_PARTY_LOGGERS = (
    "onnxruntime",
    "httpx",
    "httpcore",
    "datasets",
    "transformers",
    "sentence_transformers",
    "setfit",
    "huggingface_hub",
    "urllib3",
    "filelock",
    "torch",
)
_state = {"debug": False, "verbose": False}


@app.callback()
def _options(
    verbose: bool = Opt(False, "--verbose", "-v", help="Show third-party INFO logs."),
    debug: bool = Opt(False, "--debug", help="Show the traceback of an error."),
) -> None:
    _state.update(debug=debug, verbose=verbose)
    level = logging.INFO if verbose else logging.WARNING
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(level)


def _fail(message: str, code: int = 1) -> typer.Exit:
    lines = [l.strip() for l in str(message).splitlines() if l.strip()]
    err_console.print(f"[bold red]error:[/] {escape('; '.join(lines) or 'failed')}", highlight=False)
    return typer.Exit(code)


def _cli(fn):
    """One line and exit 1 for any error (exit 2 for usage errors); the traceback only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, click.exceptions.Exit, click.ClickException, click.Abort):
            raise
        except Exception as e:
            if _state["debug"]:
                raise
            known = type(e).__name__.endswith("Error") and type(e).__module__.split(".")[0] in (
                "router",
                "eval",
                "training",
            )
            detail = str(e) or type(e).__name__
            raise _fail(
                detail if known or isinstance(e, ValueError) else f"{type(e).__name__}: {detail}"
            ) from e

    return wrapper


def _say(message: str) -> None:
    console.print(f"[dim]{escape(message)}[/]", highlight=False)


def _table(title: str, header: list[str], rows: list[list]) -> None:
    t = Table(title=title)
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[str(c) for c in r])
    console.print(t)


# --------------------------------------------------------------------------------------- data
@data_app.command("check")
@_cli
def data_check(
    paths: list[Path] = typer.Argument(None, help="JSONL files or directories (default: data/)."),
    strict: bool = Opt(False, "--strict", help="Treat duplicates within a split as errors too."),
    as_json: bool = Opt(False, "--json", help="Print the report as JSON."),
    max_issues: int = Opt(50, help="How many issues to print (all go into --json)."),
) -> None:
    """Validate corpus files: JSON, labels, empty text, duplicates and train/dev/test leakage."""
    from training.corpus import check_files

    paths = paths or [Path("data")]
    report = check_files(paths)
    errors = report.errors + (report.warnings if strict else [])
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        raise typer.Exit(1 if errors else 0)

    for issue in report.issues[:max_issues]:
        style = "red" if issue in errors else "yellow"
        console.print(f"[{style}]{issue}[/]", highlight=False)
    if len(report.issues) > max_issues:
        console.print(f"... {len(report.issues) - max_issues} more (use --json for all)")

    for title, header, rows in report.tables():
        _table(title, header, rows)
    console.print(
        f"{len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        + (" [strict: warnings count as errors]" if strict else "")
    )
    raise typer.Exit(1 if errors else 0)


# -------------------------------------------------------------------------------------- train
def _train_config(config: Path | None, **flags):
    from training.config import TrainConfig

    overrides = {k: v for k, v in flags.items() if v is not None}
    try:
        return TrainConfig.from_file(config, **overrides) if config else TrainConfig(**overrides)
    except (OSError, ValueError) as e:
        raise _fail(f"invalid training config: {e}") from e


@app.command()
@_cli
def train(
    out: Path | None = Opt(
        None, help="Model directory to write (default: $INTENT_ROUTER_MODEL or models/intent-minilm)."
    ),
    config: Path | None = Opt(None, help="YAML/JSON file of training options; flags override it."),
    name: str | None = Opt(None, help="Model name recorded in the manifest."),
    base_model: str | None = Opt(
        None, help="Local sentence-transformers folder or hub name (default: the packaged all-MiniLM-L6-v2)."
    ),
    train_file: Path | None = Opt(None),
    dev_file: Path | None = Opt(None, help="Used to fit the temperature."),
    test_file: Path | None = Opt(None),
    seed: int | None = Opt(None),
    max_steps: int | None = Opt(None, help="Contrastive steps (batch pairs); -1 for no cap."),
    num_iterations: int | None = Opt(None),
    batch_size: int | None = Opt(None),
    num_epochs: int | None = Opt(None, "--epochs"),
    head_c: float | None = Opt(None, help="Inverse L2 strength of the logistic head."),
    max_seq_length: int | None = Opt(None),
) -> None:
    """Train the SetFit intent model and calibrate it on dev (temperature scaling)."""
    flags = {k: v for k, v in locals().items() if k not in ("out", "config")}  # before any import
    from router.routing import default_model_dir
    from training.train import summary_rows
    from training.train import train as train_model

    cfg = _train_config(config, **flags)
    out = out or default_model_dir()
    manifest = train_model(cfg, out, report=_say)
    title, header, rows = summary_rows(manifest)
    _table(title, header, rows)
    console.print(
        f"training time: {manifest.training['seconds']['total']:.1f}s; model written to [bold]{out}[/]"
    )


@app.command()
@_cli
def export(
    model: Path | None = Opt(None, help="Model directory written by 'train' (default: the default model)."),
    parity_file: Path = Opt(Path("data/test.jsonl"), help="Held-out JSONL for the parity check."),
    variants: str = Opt("fp32,int8", help="Comma-separated: fp32, int8."),
    keep_fp32: bool = Opt(
        True, "--keep-fp32/--drop-fp32", help="Keep the fp32 graph after the int8 one is made."
    ),
) -> None:
    """Export to ONNX (fp32 and int8) with calibrated probabilities; fails when parity fails."""
    from router.routing import default_model_dir
    from training.export import export_model

    manifest = export_model(
        model or default_model_dir(),
        parity_file=parity_file,
        variants=[v.strip() for v in variants.split(",") if v.strip()],
        keep_fp32=keep_fp32,
        report=_say,
    )
    for name, v in manifest.export.variants.items():
        console.print(
            f"{name}: {v.file.path} ({v.file.bytes / 1e6:.1f} MB), parity top-1 {v.parity.top1_agreement:.4f}"
        )


@app.command()
@_cli
def build(
    out: Path | None = Opt(None, help="Model directory to write (default: the default model)."),
    config: Path | None = Opt(None, help="Training config file."),
    report_dir: Path = Opt(Path("reports/build"), help="Where the evaluation report goes."),
    oos: Path = Opt(Path("data/oos.jsonl"), help="Out-of-scope file for the evaluation, if it exists."),
) -> None:
    """The main job: train on data/, calibrate, export fp32+int8 with parity, evaluate the int8 router."""
    from training.pipeline import build as run_build

    manifest, report = run_build(_train_config(config), out, report_dir=report_dir, oos=oos, report=_say)
    console.print(f"built [bold]{manifest.model_id}[/]")
    if report is not None:
        _print_eval_summary(report)
        console.print(f"report written to [bold]{report_dir}[/]")


# -------------------------------------------------------------------------------------- route
@app.command()
@_cli
def route(
    texts: list[str] = typer.Argument(None, help="Message(s) to route."),
    role: str = Opt("viewer", help="Caller's role (RBAC)."),
    file: Path | None = Opt(
        None, "--file", "-f", help="Route every line of a file ('-' for stdin); JSONL rows use their 'text'."
    ),
    model: Path | None = Opt(
        None, help="Exported model directory (default: $INTENT_ROUTER_MODEL or the shipped model)."
    ),
    config: Path | None = Opt(None, help="Router config YAML (skills, roles, threshold)."),
    threshold: float | None = Opt(None, help="Override the confidence threshold, in (0, 1]."),
    variant: str | None = Opt(None, help="Graph variant: int8 (default) or fp32."),
    verifier_url: str | None = Opt(
        None,
        envvar="INTENT_ROUTER_VERIFIER_URL",
        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1",
    ),
    verifier_model: str | None = Opt(
        None, envvar="INTENT_ROUTER_VERIFIER_MODEL", help="Model name for the verifier."
    ),
    verifier_timeout: float | None = Opt(
        None, help="Seconds per verifier HTTP request (the total deadline defaults to twice this)."
    ),
    as_json: bool = Opt(False, "--json", help="Print full decisions as JSON (one line each)."),
) -> None:
    """Route messages: intent, confidence, granted and denied skills."""
    from eval.data import load_messages
    from router.config import RouterConfig
    from router.routing import Router

    messages = (load_messages(file) if file is not None else []) + list(texts or [])
    if not messages:
        raise _fail("give a message, or --file FILE / --file - for stdin", code=2)
    cfg = RouterConfig.load(config)
    verifier = _make_verifier(verifier_url, verifier_model, verifier_timeout, cfg)
    router = Router.load(model, config=cfg, verifier=verifier, threshold=threshold, variant=variant)
    decisions = (
        router.route_batch(messages, role) if verifier is None else [router.route(m, role) for m in messages]
    )
    if as_json or len(messages) > 1:
        for d in decisions:
            print(d.model_dump_json(exclude_none=False) if as_json else _one_line(d))
        return
    d = decisions[0]
    console.print(_one_line(d), highlight=False)
    for x in d.denied:
        console.print(f"  denied {x.skill}{' (required)' if x.required else ''}: {x.reason}", highlight=False)
    if d.message:
        console.print(f"  {d.message}", highlight=False)


def _one_line(d) -> str:
    skills = ",".join(d.skills.required) + ("+" + ",".join(d.skills.optional) if d.skills.optional else "")
    return json.dumps(
        {
            "intent": d.intent.value if d.intent else "-",
            "confidence": f"{d.confidence:.3f}" if d.confidence is not None else "-",
            "source": d.source,
            "reason": d.reason_code.value,
            "skills": skills,
            "confirm": d.requires_confirmation,
            "servable": d.servable,
            "ms": round(d.latency.total_ms, 3),
        }
    )


def _make_verifier(url: str | None, model: str | None, timeout: float | None, config=None):
    if not url:
        return None
    from router.llm_verifier import LLMVerifier, VerifierSettings

    return LLMVerifier(VerifierSettings.from_env(base_url=url, model=model, timeout=timeout), registry=config)


@config_app.command("check")
@_cli
def config_check(
    path: Path | None = typer.Argument(None, help="Router config YAML (default: the packaged one)."),
    as_json: bool = Opt(False, "--json", help="Print the effective permissions as JSON."),
) -> None:
    """Load a router config strictly and print the effective roles -> skills -> permissions."""
    from router.rbac import check_config, format_permissions

    report = check_config(path)
    print(json.dumps(report, indent=2) if as_json else format_permissions(report))


@app.command()
@_cli
def schema(
    out: Path = Opt(Path("router/schema/decision.schema.json"), help="Where to write the JSON Schema."),
) -> None:
    """Write the JSON Schema of the routing Decision."""
    from router.decision import write_json_schema

    write_json_schema(out)
    console.print(f"wrote {out}")


# --------------------------------------------------------------------------------------- eval
@app.command("eval")
@_cli
def evaluate(
    data: str = Opt(..., help="Labeled JSONL/CSV/TSV/Parquet file, or a Hub dataset name (online only)."),
    model: Path | None = Opt(
        None,
        help="Exported model dir, training output dir or bare SetFit checkpoint (default: the shipped model).",
    ),
    oos: str | None = Opt(None, help="Unlabeled out-of-scope file for out-of-scope recall."),
    out: Path = Opt(Path("reports/eval"), help="Directory for eval.json, report.md and the PNG plots."),
    threshold: float | None = Opt(None, help="tau (default: the router's, 0.75)."),
    variant: str | None = Opt(None, help="ONNX graph: int8 (default) or fp32."),
    text_column: str = Opt("text", help="Column holding the message."),
    label_column: str = Opt("label", help="Column holding the intent label."),
    backend: str = Opt("auto", help="auto (onnx when exported), onnx or torch."),
    split: str | None = Opt(None, help="Split of a Hub dataset (default: test)."),
    skip_invalid: bool = Opt(
        False, "--skip-invalid", help="Leave out (and list) invalid rows instead of stopping."
    ),
    verifier_url: str | None = Opt(
        None, help="OpenAI-compatible base URL: report the verifier lift below tau."
    ),
    verifier_model: str | None = Opt(None, help="Model name for the verifier."),
    verifier_max: int | None = Opt(None, help="Verify at most this many below-tau messages."),
    max_latency_samples: int = Opt(300, help="Messages timed one by one (0: skip latency)."),
) -> dict:
    """Evaluate a model: metrics, calibration, threshold sweep, out-of-scope recall, latency; write the report."""
    options = {
        k: v for k, v in locals().items() if not k.startswith("verifier_") and k not in ("model", "data")
    }
    from training.pipeline import evaluate_model  # after locals() is read

    verifier = _make_verifier(verifier_url, verifier_model, None)
    name = f"{verifier_model or 'default'} @ {verifier_url}" if verifier else None
    report = evaluate_model(
        model, data, verifier=verifier, verifier_max=verifier_max, verifier_name=name, **options
    )
    _print_eval_summary(report)
    console.print(f"report written to [bold]{out}[/] (eval.json, report.md, PNG plots)")
    return report


def _print_eval_summary(report: dict) -> None:
    from eval.markdown import per_class_rows, summary_rows

    m, d = report["model"], report["data"]
    _table(
        f"{m['model_id']} ({m['backend']}) on {d['source']} (n={d['n']})",
        ["metric", "value"],
        summary_rows(report),
    )
    _table("Per class", ["label", "precision", "recall", "F1", "support"], per_class_rows(report))
    console.print(f"{len(report['misclassified'])} misclassified (see report.md)")


@app.command()
@_cli
def gate(
    report: Path = Opt(Path("reports/ci/eval.json"), help="eval.json written by 'intent-router eval'."),
    baseline: Path = Opt(Path("eval/baseline.json"), help="Committed baseline to compare with."),
    write_baseline: bool = Opt(
        False,
        "--write-baseline",
        help="Write BASELINE from REPORT with the default limits instead of gating.",
    ),
    as_json: bool = Opt(False, "--json", help="Print the checks as JSON."),
) -> None:
    """CI gate: exit 1 when accuracy, macro-F1, a class F1, ECE or accepted accuracy regress past the baseline's limits."""
    from eval.gate import GateError, gate_notes, gate_passed, load_baseline, run_gate
    from eval.gate import write_baseline as write_baseline_file
    from eval.report import ReportError, load_report

    try:
        rep = load_report(report)
        if write_baseline:
            write_baseline_file(rep, baseline)
            console.print(
                f"baseline written to [bold]{baseline}[/] from {report} ({rep['model']['model_id']})"
            )
            return
        base = load_baseline(baseline)
        checks = run_gate(rep, base)
    except (ReportError, GateError, KeyError) as e:
        raise _fail(f"{e}" if not isinstance(e, KeyError) else f"report or baseline lacks {e}", code=2) from e
    passed = gate_passed(checks)
    if as_json:
        print(
            json.dumps(
                {"passed": passed, "checks": [ch.to_dict() for ch in checks], "notes": gate_notes(rep, base)},
                indent=2,
            )
        )
        raise typer.Exit(0 if passed else 1)
    t = Table(
        title=f"Gate: {rep['model']['model_id']} vs baseline {base.get('source', {}).get('model_id', baseline)}"
    )
    for col in ("check", "value", "limit", "baseline", "result", "detail"):
        t.add_column(
            col, justify="right" if col in ("value", "limit", "baseline") else "left", no_wrap=col != "detail"
        )
    f = lambda x: "-" if x is None else f"{x:.4f}"  # noqa: E731
    for ch in checks:
        t.add_row(
            ch.name,
            f(ch.value),
            f"{ch.op} {f(ch.limit)}",
            f(ch.baseline),
            "[green]pass[/]" if ch.passed else "[bold red]FAIL[/]",
            ch.detail,
        )
    console.print(t)
    for note in gate_notes(rep, base):
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    failed = [ch.name for ch in checks if not ch.passed]
    console.print("[green]gate passed[/]" if passed else f"[bold red]gate failed:[/] {', '.join(failed)}")
    raise typer.Exit(0 if passed else 1)


# ------------------------------------------------------------------------------------ bench
@bench_app.command("speed")
@_cli
def bench_speed(
    model: Path | None = Opt(
        None, help="Model directory (default: the shipped model; its checkpoint/ enables the PyTorch row)."
    ),
    data: Path = Opt(Path("data/test.jsonl"), help="JSONL messages to time."),
    limit: int = Opt(500, help="How many messages."),
    torch: bool = Opt(True, "--torch/--no-torch", help="Include SetFit PyTorch predict_proba."),
    batch_size: int = Opt(64),
    threads: int | None = Opt(None, help="onnxruntime intra-op threads (default: all cores)."),
    out: Path | None = Opt(None, help="Also write the results as JSON."),
    runs: int = Opt(3, help="Interleaved runs; every figure is their median (spread in the JSON)."),
) -> None:
    """Latency, throughput, load time and memory: ONNX int8 and fp32 routers beside SetFit PyTorch."""
    from eval.bench_speed import table_rows
    from training.pipeline import speed_benchmark

    res = speed_benchmark(
        model,
        data,
        limit=limit,
        include_torch=torch,
        batch_size=batch_size,
        threads=threads,
        out=out,
        report=_say,
        runs=runs,
    )
    header, rows = table_rows(res)
    _table(f"{res['model']}: {res['messages']} messages, {res['machine']['cpus']} CPUs", header, rows)
    if out:
        console.print(f"wrote {out}")


@bench_app.command("dataset")
@_cli
def bench_dataset(
    name: str = Opt(..., help="Benchmark: clinc150 or banking77."),
    path: Path = Opt(
        ..., help="CLINC150: data_full.json or its folder. BANKING77: folder with train.csv and test.csv."
    ),
    shots: int | None = Opt(
        None, help="Training rows per class, sampled per seed (0 or omitted: full train split)."
    ),
    seeds: int = Opt(
        3, help="Number of seeds (0..n-1); each draws its own k-shot sample and trains a model."
    ),
    max_steps: int | None = Opt(
        None, help="Contrastive steps per seed (default: the training default, 400)."
    ),
    batch_size: int | None = Opt(None, help="Pairs per contrastive step (default 32)."),
    base_model: str | None = Opt(
        None, help="Sentence-transformers folder or hub name (default: packaged all-MiniLM-L6-v2)."
    ),
    out: Path | None = Opt(None, help="Write the results JSON here (also after each seed)."),
    oos_class: bool = Opt(
        False, "--oos-class", help="CLINC150: train oos_train as an out-of-scope class (+ in-scope distance)."
    ),
) -> dict:
    """Train on a public benchmark (k-shot or full) per seed; report test accuracy mean ± std, and out-of-scope recall for CLINC150."""
    from training.benchmarks import BENCHMARKS, format_summary, run_benchmark

    if name not in BENCHMARKS:
        raise _fail(f"--name must be one of {', '.join(BENCHMARKS)}", code=2)
    if (shots is not None and shots < 0) or seeds < 1:
        raise _fail("--shots must be >= 0 and --seeds >= 1", code=2)
    result = run_benchmark(
        name,
        path,
        shots=shots,
        seeds=seeds,
        max_steps=max_steps,
        batch_size=batch_size,
        base_model=base_model,
        report=_say,
        out=out,
        command=" ".join(["intent-router", *sys.argv[1:]]) if "bench" in sys.argv[1:3] else None,
        oos_class=oos_class,
    )
    hp = result["hyperparameters"]
    title = f"{name} {f'{shots}-shot' if shots else 'full data'}, {seeds} seed(s), {hp['max_steps']} steps x {hp['batch_size']} pairs"
    _table(title, ["metric", "mean ± std (min-max)"], format_summary(result))
    if out:
        console.print(f"results written to [bold]{out}[/]")
    return result


# ------------------------------------------------------------------------------ serve and score
@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Address to listen on; non-loopback needs --key-file."),
    port: int = typer.Option(8080, help="TCP port."),
    key_file: Path | None = typer.Option(
        None, envvar="INTENT_ROUTER_KEY_FILE", help="YAML/JSON: API key sha256 -> roles (docs/serve.md)."
    ),
    model: Path | None = typer.Option(None, help="Exported model directory (default: the shipped model)."),
    config: Path | None = typer.Option(None, help="Router config YAML (skills, roles, threshold)."),
    threshold: float | None = typer.Option(None, help="Override the confidence threshold, in (0, 1]."),
    max_body_bytes: int = typer.Option(1_048_576, help="Larger request bodies get 413."),
    max_messages: int = typer.Option(64, help="More messages in one request get 422."),
    max_chars: int = typer.Option(10_000, help="Longer messages get 422."),
    inference_threads: int = typer.Option(
        0, help="Concurrent route() calls without a verifier; 0: one per core."
    ),
    ort_threads: int = typer.Option(1, help="onnxruntime intra-op threads per call (0: all cores)."),
    verifier_url: str | None = typer.Option(
        None, envvar="INTENT_ROUTER_VERIFIER_URL", help="OpenAI-compatible base URL for the LLM verifier."
    ),
    verifier_model: str | None = typer.Option(None, envvar="INTENT_ROUTER_VERIFIER_MODEL"),
    verifier_timeout: float | None = typer.Option(None, help="Seconds per verifier HTTP request."),
    graceful_timeout: float = typer.Option(30.0, help="Seconds to finish requests in flight on shutdown."),
    load_delay: float = typer.Option(0.0, hidden=True, help="Wait before loading the model (tests)."),
    log_level: str = typer.Option("info"),
) -> None:
    """Serve the router over HTTP (extra 'serve'): POST /v1/route, /healthz, /readyz, /metrics."""
    try:
        from router.serve import ServeSettings
        from router.serve.app import run
        from router.serve.auth import KeyFileError
    except ImportError as e:
        raise _fail(f"{e}; install the server with: pip install '.[serve]'") from None
    try:
        settings = ServeSettings(
            host=host,
            port=port,
            key_file=key_file,
            model_dir=model,
            config=config,
            threshold=threshold,
            max_body_bytes=max_body_bytes,
            max_messages=max_messages,
            max_chars=max_chars,
            inference_threads=inference_threads,
            ort_threads=ort_threads or None,
            verifier_url=verifier_url,
            verifier_model=verifier_model,
            verifier_timeout=verifier_timeout,
            graceful_timeout=graceful_timeout,
            load_delay=load_delay,
            log_level=log_level,
        )
        run(settings)
    except (ValueError, KeyFileError) as e:
        raise _fail(str(e), code=2) from None


@app.command()
def score(
    input: Path = typer.Argument(..., help="JSONL / CSV / TSV / Parquet file of messages."),
    out: Path = typer.Option(..., "--out", "-o", help="Decisions: .parquet or .jsonl."),
    role: str = typer.Option("viewer", help="Role to route for (RBAC)."),
    text_column: str = typer.Option("text", help="Column with the message."),
    label_column: str = typer.Option("label", help="Column with the true intent (--with-labels)."),
    id_column: str | None = typer.Option(None, help="Column copied to the output as 'id'."),
    with_labels: bool = typer.Option(False, "--with-labels", help="Add accuracy and the confusion matrix."),
    skip_invalid: bool = typer.Option(False, "--skip-invalid", help="Write invalid rows with an 'error'."),
    keep_text: bool = typer.Option(False, "--keep-text", help="Copy the message into the output."),
    model: Path | None = typer.Option(None, help="Exported model directory (default: the shipped model)."),
    config: Path | None = typer.Option(None, help="Router config YAML."),
    threshold: float | None = typer.Option(None, help="Override the confidence threshold."),
    ray: bool = typer.Option(False, "--ray", help="Run the routing on Ray Data (extra 'scale')."),
    ray_address: str | None = typer.Option(
        None,
        envvar="RAY_ADDRESS",
        help="Ray cluster to join (e.g. ray://head:10001); none: start a local Ray.",
    ),
    workers: int = typer.Option(2, help="Ray actors (one Router each)."),
    chunk_rows: int = typer.Option(2048, help="Rows per part file: the most a crash makes you score again."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Discard earlier output or parts."),
    max_rows: int | None = typer.Option(None, hidden=True, help="Stop after N rows (tests, benchmarks)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Route every message of a file and write the decisions; resumes after a crash (docs/score.md)."""
    try:
        from eval.score import ScoreError, ScoreOptions, score_file
    except ImportError as e:
        raise _fail(f"{e}; install with: pip install '.[scale]'") from None
    opts = ScoreOptions(
        role=role,
        text_column=text_column,
        label_column=label_column,
        id_column=id_column,
        with_labels=with_labels,
        skip_invalid=skip_invalid,
        keep_text=keep_text,
        model_dir=str(model) if model else None,
        config=str(config) if config else None,
        threshold=threshold,
        chunk_rows=chunk_rows,
    )
    try:
        if ray:
            from eval.score_ray import score_file_ray

            address = ray_address or None
            summary = score_file_ray(
                input,
                out,
                opts,
                address=address,
                workers=workers,
                overwrite=overwrite,
                progress=not quiet,
                max_rows=max_rows,
            )
        else:
            summary = score_file(input, out, opts, overwrite=overwrite, progress=not quiet, max_rows=max_rows)
    except ImportError as e:
        raise _fail(f"{e}; install with: pip install '.[scale]'") from None
    except (ScoreError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e)) from None
    print(json.dumps(summary))


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app()


if __name__ == "__main__":
    main()
