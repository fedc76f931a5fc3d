"""intent-router command line: a thin Typer layer over router/, training/ and eval/.

Each command parses arguments, calls one library function and prints; the work lives in the packages.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    help="Train, export, evaluate and run the five-intent router.", no_args_is_help=True, add_completion=False
)
data_app = typer.Typer(help="Corpus tools.", no_args_is_help=True)
app.add_typer(data_app, name="data")

console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True)

DEFAULT_MODEL_DIR = (
    Path(__file__).resolve().parent / "models" / "intent-minilm"
)  # where training writes in a checkout


def _fail(message: str, code: int = 1) -> typer.Exit:
    err_console.print(f"[bold red]error:[/] {message}")
    return typer.Exit(code)


# --------------------------------------------------------------------------------------- data
@data_app.command("check")
def data_check(
    paths: list[Path] = typer.Argument(None, help="JSONL files or directories (default: data/)."),
    strict: bool = typer.Option(False, "--strict", help="Treat duplicates within a split as errors too."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
    max_issues: int = typer.Option(50, help="How many issues to print (all go into --json)."),
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

    balance = report.class_balance()
    labels = sorted({l for c in balance.values() for l in c})
    t = Table(title="Class balance")
    t.add_column("split")
    for l in labels:
        t.add_column(l, justify="right")
    t.add_column("total", justify="right")
    for split, counts in balance.items():
        t.add_row(split, *[str(counts.get(l, 0)) for l in labels], str(sum(counts.values())))
    console.print(t)

    stats = report.length_stats()
    t = Table(title="Length (words)")
    cols = [
        "rows",
        "min_words",
        "median_words",
        "mean_words",
        "p90_words",
        "max_words",
        "share_le_4_words",
        "share_ge_25_words",
    ]
    t.add_column("split")
    for c in cols:
        t.add_column(c.replace("_words", "").replace("share_", ""), justify="right")
    for split, s in stats.items():
        t.add_row(split, *[str(s[c]) for c in cols])
    console.print(t)
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
    except Exception as e:
        raise _fail(f"invalid training config: {e}")


@app.command()
def train(
    out: Path = typer.Option(
        DEFAULT_MODEL_DIR, help="Model directory to write (checkpoint/ and manifest.json)."
    ),
    config: Path | None = typer.Option(None, help="YAML/JSON file of training options; flags override it."),
    name: str | None = typer.Option(None, help="Model name recorded in the manifest."),
    base_model: str | None = typer.Option(
        None, help="Local sentence-transformers folder or hub name (default: the packaged all-MiniLM-L6-v2)."
    ),
    train_file: Path | None = typer.Option(None),
    dev_file: Path | None = typer.Option(None, help="Used to fit the temperature."),
    test_file: Path | None = typer.Option(None),
    seed: int | None = typer.Option(None),
    max_steps: int | None = typer.Option(None, help="Contrastive steps (batch pairs); -1 for no cap."),
    num_iterations: int | None = typer.Option(None),
    batch_size: int | None = typer.Option(None),
    epochs: int | None = typer.Option(None, "--epochs"),
    head_c: float | None = typer.Option(None, help="Inverse L2 strength of the logistic head."),
    max_seq_length: int | None = typer.Option(None),
) -> None:
    """Train the SetFit intent model and calibrate it on dev (temperature scaling)."""
    cfg = _train_config(
        config,
        name=name,
        base_model=base_model,
        train_file=train_file,
        dev_file=dev_file,
        test_file=test_file,
        seed=seed,
        max_steps=max_steps,
        num_iterations=num_iterations,
        batch_size=batch_size,
        num_epochs=epochs,
        head_c=head_c,
        max_seq_length=max_seq_length,
    )
    _run_train(cfg, out)


def _run_train(cfg, out: Path):
    from training.corpus import CorpusError
    from training.train import train as train_model

    try:
        manifest = train_model(cfg, out, report=lambda m: console.print(f"[dim]{m}[/]"))
    except (CorpusError, ValueError, FileNotFoundError, RuntimeError) as e:
        raise _fail(str(e))
    _print_training_summary(manifest)
    console.print(f"model written to [bold]{out}[/]")
    return manifest


def _print_training_summary(manifest) -> None:
    cal = manifest.calibration
    t = Table(title=f"{manifest.name}: temperature {cal.temperature:.3f}")
    t.add_column("split")
    for c in ("accuracy", "macro_f1", "ece before", "ece after", "nll before", "nll after"):
        t.add_column(c, justify="right")
    for split, m in manifest.metrics.items():
        t.add_row(
            split,
            f"{m['accuracy']:.4f}",
            f"{m['macro_f1']:.4f}",
            f"{cal.before[split]['ece']:.4f}",
            f"{cal.after[split]['ece']:.4f}",
            f"{cal.before[split]['nll']:.4f}",
            f"{cal.after[split]['nll']:.4f}",
        )
    console.print(t)
    console.print(f"training time: {manifest.training['seconds']['total']:.1f}s")


@app.command()
def export(
    model: Path = typer.Option(DEFAULT_MODEL_DIR, help="Model directory written by 'train'."),
    parity_file: Path = typer.Option(Path("data/test.jsonl"), help="Held-out JSONL for the parity check."),
    variants: str = typer.Option("fp32,int8", help="Comma-separated: fp32, int8."),
    keep_fp32: bool = typer.Option(
        True, "--keep-fp32/--drop-fp32", help="Keep the fp32 graph after the int8 one is made."
    ),
) -> None:
    """Export to ONNX (fp32 and int8) with calibrated probabilities; fails when parity fails."""
    from router.manifest import ModelError
    from training.export import export_model

    try:
        manifest = export_model(
            model,
            parity_file=parity_file,
            variants=[v.strip() for v in variants.split(",") if v.strip()],
            keep_fp32=keep_fp32,
            report=lambda m: console.print(f"[dim]{m}[/]"),
        )
    except (ModelError, ValueError) as e:
        raise _fail(str(e))
    for name, v in manifest.export.variants.items():
        console.print(
            f"{name}: {v.file.path} ({v.file.bytes / 1e6:.1f} MB), parity top-1 {v.parity.top1_agreement:.4f}"
        )


@app.command()
def build(
    out: Path = typer.Option(DEFAULT_MODEL_DIR, help="Model directory to write."),
    config: Path | None = typer.Option(None, help="Training config file."),
    report_dir: Path = typer.Option(Path("reports/build"), help="Where the evaluation report goes."),
) -> None:
    """The main job: train on data/, calibrate, export fp32+int8 with parity, evaluate the int8 router."""
    import time

    from router.manifest import ModelError
    from training.export import export_model

    t0 = time.perf_counter()
    cfg = _train_config(config)
    manifest = _run_train(cfg, out)
    try:
        export_model(
            out, parity_file=cfg.test_file or cfg.dev_file, report=lambda m: console.print(f"[dim]{m}[/]")
        )
    except (ModelError, ValueError) as e:
        raise _fail(str(e))
    seconds = time.perf_counter() - t0
    from router.manifest import load_manifest

    manifest = load_manifest(out)
    manifest.training["seconds"]["build_total"] = round(seconds, 2)
    manifest.save(out)
    console.print(f"train + calibrate + export: {seconds:.1f}s")
    if cfg.test_file and _has_eval():
        evaluate(
            model=out,
            data=cfg.test_file,
            oos=Path("data/oos.jsonl") if Path("data/oos.jsonl").is_file() else None,
            out=report_dir,
            threshold=None,
            variant=None,
            text_column="text",
            label_column="label",
        )


def _has_eval() -> bool:
    try:
        import eval.report  # noqa: F401
    except ImportError:
        return False
    return True


# -------------------------------------------------------------------------------------- route
def _read_messages(texts: list[str], file: Path | None) -> list[str]:
    if file is None:
        return list(texts)
    stream = sys.stdin if str(file) == "-" else open(file, encoding="utf-8")
    with stream:
        lines = [l.rstrip("\n") for l in stream]
    out = []
    for l in lines:
        if l.lstrip().startswith("{"):
            try:
                obj = json.loads(l)
                out.append(obj["text"] if isinstance(obj, dict) and "text" in obj else l)
                continue
            except json.JSONDecodeError:
                pass
        out.append(l)
    return out + list(texts)


@app.command()
def route(
    texts: list[str] = typer.Argument(None, help="Message(s) to route."),
    role: str = typer.Option("viewer", help="Caller's role (RBAC)."),
    file: Path | None = typer.Option(
        None, "--file", "-f", help="Route every line of a file ('-' for stdin); JSONL rows use their 'text'."
    ),
    model: Path | None = typer.Option(
        None, help="Exported model directory (default: $INTENT_ROUTER_MODEL or the shipped model)."
    ),
    config: Path | None = typer.Option(None, help="Router config YAML (skills, roles, threshold)."),
    threshold: float | None = typer.Option(None, help="Override the confidence threshold, in (0, 1]."),
    variant: str | None = typer.Option(None, help="Graph variant: int8 (default) or fp32."),
    verifier_url: str | None = typer.Option(
        None,
        envvar="INTENT_ROUTER_VERIFIER_URL",
        help="OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1",
    ),
    verifier_model: str | None = typer.Option(
        None, envvar="INTENT_ROUTER_VERIFIER_MODEL", help="Model name for the verifier."
    ),
    verifier_timeout: float | None = typer.Option(
        None, help="Seconds per verifier HTTP request (the total deadline defaults to twice this)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print full decisions as JSON (one line each)."),
) -> None:
    """Route messages: intent, confidence, granted and denied skills."""
    from router.manifest import ModelError
    from router.routing import Router

    messages = _read_messages(texts or [], file)
    if not messages:
        raise _fail("give a message, or --file FILE / --file - for stdin", code=2)
    from router.config import RouterConfig

    try:
        cfg = RouterConfig.load(config)
        verifier = _make_verifier(verifier_url, verifier_model, verifier_timeout, cfg)
        router = Router.load(model, config=cfg, verifier=verifier, threshold=threshold, variant=variant)
    except (ModelError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e))
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
    intent = d.intent.value if d.intent else "-"
    conf = f"{d.confidence:.3f}" if d.confidence is not None else "-"
    skills = ",".join(d.skills.required) + ("+" + ",".join(d.skills.optional) if d.skills.optional else "")
    return json.dumps(
        {
            "intent": intent,
            "confidence": conf,
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
    try:
        from router.llm_verifier import LLMVerifier, VerifierSettings
    except ImportError:
        raise _fail("this build has no LLM verifier")
    settings = VerifierSettings.from_env(base_url=url, model=model, timeout=timeout)
    return LLMVerifier(settings, registry=config)


@app.command()
def schema(
    out: Path = typer.Option(
        Path("router/schema/decision.schema.json"), help="Where to write the JSON Schema."
    ),
) -> None:
    """Write the JSON Schema of the routing Decision."""
    from router.decision import write_json_schema

    write_json_schema(out)
    console.print(f"wrote {out}")


# --------------------------------------------------------------------------------------- eval
from typing import Annotated  # noqa: E402  (eval/gate use Annotated so they can be called as plain functions)


@app.command("eval")
def evaluate(
    data: Annotated[
        str, typer.Option(help="Labeled JSONL/CSV/TSV/Parquet file, or a Hub dataset name (online only).")
    ],
    model: Annotated[
        Path | None,
        typer.Option(
            help="Exported model dir, training output dir or bare SetFit checkpoint (default: the shipped model)."
        ),
    ] = None,
    oos: Annotated[
        str | None, typer.Option(help="Unlabeled out-of-scope file for out-of-scope recall.")
    ] = None,
    out: Annotated[Path, typer.Option(help="Directory for eval.json, report.md and the PNG plots.")] = Path(
        "reports/eval"
    ),
    threshold: Annotated[float | None, typer.Option(help="tau (default: the router's, 0.75).")] = None,
    variant: Annotated[str | None, typer.Option(help="ONNX graph: int8 (default) or fp32.")] = None,
    text_column: Annotated[str, typer.Option(help="Column holding the message.")] = "text",
    label_column: Annotated[str, typer.Option(help="Column holding the intent label.")] = "label",
    backend: Annotated[str, typer.Option(help="auto (onnx when exported), onnx or torch.")] = "auto",
    split: Annotated[str | None, typer.Option(help="Split of a Hub dataset (default: test).")] = None,
    skip_invalid: Annotated[
        bool, typer.Option("--skip-invalid", help="Leave out (and list) invalid rows instead of stopping.")
    ] = False,
    verifier_url: Annotated[
        str | None, typer.Option(help="OpenAI-compatible base URL: report the verifier lift below tau.")
    ] = None,
    verifier_model: Annotated[str | None, typer.Option(help="Model name for the verifier.")] = None,
    verifier_max: Annotated[
        int | None, typer.Option(help="Verify at most this many below-tau messages.")
    ] = None,
    max_latency_samples: Annotated[
        int, typer.Option(help="Messages timed one by one (0: skip latency).")
    ] = 300,
) -> dict:
    """Evaluate a model: metrics, calibration, threshold sweep, out-of-scope recall, latency; write the report."""
    from eval.data import DataError
    from eval.report import run_evaluation, write_report
    from router.manifest import ModelError
    from router.routing import default_model_dir

    verifier = _make_verifier(verifier_url, verifier_model, None)
    try:
        report = run_evaluation(
            model or default_model_dir(),
            data,
            oos=oos,
            threshold=threshold,
            variant=variant,
            backend=backend,
            text_column=text_column,
            label_column=label_column,
            split=split,
            skip_invalid=skip_invalid,
            verifier=verifier,
            verifier_max=verifier_max,
            verifier_name=f"{verifier_model or 'default'} @ {verifier_url}" if verifier else None,
            max_latency_samples=max_latency_samples,
        )
    except (DataError, ModelError, ValueError, FileNotFoundError) as e:
        raise _fail(str(e))
    paths = write_report(report, out)
    _print_eval_summary(report)
    console.print(f"report written to [bold]{out}[/] ({', '.join(p.name for p in paths.values())})")
    return report


def _print_eval_summary(report: dict) -> None:
    m, c, cal, at = (
        report["model"],
        report["classification"],
        report["calibration"],
        report["thresholds"]["at_tau"],
    )
    f = lambda x, nd=4: "-" if x is None else f"{x:.{nd}f}"  # noqa: E731
    t = Table(
        title=f"{m['model_id']} ({m['backend']}) on {report['data']['source']} (n={report['data']['n']})"
    )
    t.add_column("metric")
    t.add_column("value", justify="right")
    rows = [
        ("accuracy", f(c["accuracy"])),
        ("macro-F1", f(c["macro_f1"])),
        ("ECE", f(cal["ece"])),
        ("NLL", f(cal["nll"])),
        ("Brier", f(cal["brier"])),
        (f"accepted at tau {at['tau']:g}", f(at["accepted_share"])),
        ("accuracy of accepted", f(at["accepted_accuracy"])),
        ("to verifier", f(at["to_verifier_share"])),
    ]
    if report.get("oos"):
        rows.append((f"out-of-scope recall (n={report['oos']['n']})", f(report["oos"]["recall"])))
    if report.get("latency"):
        s, b = report["latency"]["single"], report["latency"]["batch"]
        rows.append(
            ("latency p50/p95/p99 ms", f"{f(s['p50_ms'], 2)} / {f(s['p95_ms'], 2)} / {f(s['p99_ms'], 2)}")
        )
        rows.append(("batch msg/s", f(b["messages_per_second"], 1)))
    if report.get("verifier"):
        v = report["verifier"]
        rows.append(
            (
                f"verifier lift on {v['n_verified']} below tau",
                f"{f(v['classifier_accuracy'])} -> {f(v['verifier_accuracy'])}",
            )
        )
    for r in rows:
        t.add_row(*r)
    console.print(t)
    t = Table(title="Per class")
    for col in ("label", "precision", "recall", "F1", "support"):
        t.add_column(col, justify="left" if col == "label" else "right")
    for label, v in c["per_class"].items():
        t.add_row(label, f(v["precision"]), f(v["recall"]), f(v["f1"]), str(v["support"]))
    console.print(t)
    console.print(f"{len(report['misclassified'])} misclassified (see report.md)")


@app.command()
def gate(
    report: Annotated[Path, typer.Option(help="eval.json written by 'intent-router eval'.")] = Path(
        "reports/ci/eval.json"
    ),
    baseline: Annotated[Path, typer.Option(help="Committed baseline to compare with.")] = Path(
        "eval/baseline.json"
    ),
    write_baseline: Annotated[
        bool,
        typer.Option(
            "--write-baseline", help="Write BASELINE from REPORT with the default limits instead of gating."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
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
        raise _fail(f"{e}" if not isinstance(e, KeyError) else f"report or baseline lacks {e}", code=2)
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
bench_app = typer.Typer(help="Benchmarks: public intent datasets.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")


@bench_app.command("speed")
def bench_speed(
    model: Path | None = typer.Option(
        None, help="Model directory (default: the shipped model; its checkpoint/ enables the PyTorch row)."
    ),
    data: Path = typer.Option(Path("data/test.jsonl"), help="JSONL messages to time."),
    limit: int = typer.Option(500, help="How many messages."),
    torch: bool = typer.Option(True, "--torch/--no-torch", help="Include SetFit PyTorch predict_proba."),
    batch_size: int = typer.Option(64),
    threads: int | None = typer.Option(None, help="onnxruntime intra-op threads (default: all cores)."),
    out: Path | None = typer.Option(None, help="Also write the results as JSON."),
) -> None:
    """Latency, throughput, load time and memory: ONNX int8 and fp32 routers beside SetFit PyTorch."""
    from eval.bench_speed import run_speed_benchmark
    from router.routing import default_model_dir
    from training.corpus import load_examples

    model = model or default_model_dir()
    texts = [e.text for e in load_examples(data)][:limit]
    res = run_speed_benchmark(
        model,
        texts,
        include_torch=torch,
        batch_size=batch_size,
        threads=threads,
        report=lambda m: console.print(f"[dim]{m}[/]"),
    )
    t = Table(title=f"{res['model']}: {res['messages']} messages, {res['machine']['cpus']} CPUs")
    for c in (
        "backend",
        "load s",
        "p50 ms",
        "p95 ms",
        "p99 ms",
        "batch msg/s",
        "RSS +MB",
        "p50 speed-up",
        "tput ratio",
    ):
        t.add_column(c, justify="right" if c != "backend" else "left")
    for r in res["rows"]:
        t.add_row(
            r["name"],
            f"{r['load_s']:.2f}",
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['batch_msgs_per_s']:.0f}",
            f"{r['rss_added_mb']:.0f}",
            f"{r['speedup_p50_vs_setfit']:.1f}x" if "speedup_p50_vs_setfit" in r else "-",
            f"{r['throughput_vs_setfit']:.1f}x" if "throughput_vs_setfit" in r else "-",
        )
    console.print(t)
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {out}")


@bench_app.command("dataset")
def bench_dataset(
    name: Annotated[str, typer.Option(help="Benchmark: clinc150 or banking77.")],
    path: Annotated[
        Path,
        typer.Option(
            help="CLINC150: data_full.json or its folder. BANKING77: folder with train.csv and test.csv."
        ),
    ],
    shots: Annotated[
        int | None,
        typer.Option(help="Training rows per class, sampled per seed (0 or omitted: full train split)."),
    ] = None,
    seeds: Annotated[
        int,
        typer.Option(help="Number of seeds (0..n-1); each draws its own k-shot sample and trains a model."),
    ] = 3,
    max_steps: Annotated[
        int | None, typer.Option(help="Contrastive steps per seed (default: the training default, 400).")
    ] = None,
    batch_size: Annotated[int | None, typer.Option(help="Pairs per contrastive step (default 32).")] = None,
    base_model: Annotated[
        str | None,
        typer.Option(help="Sentence-transformers folder or hub name (default: packaged all-MiniLM-L6-v2)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Write the results JSON here (also after each seed).")
    ] = None,
) -> dict:
    """Train on a public benchmark (k-shot or full) per seed; report test accuracy mean ± std, and out-of-scope recall for CLINC150."""
    from rich.markup import escape

    from training.benchmarks import BENCHMARKS, BenchmarkDataError, format_summary, run_benchmark

    if name not in BENCHMARKS:
        raise _fail(f"--name must be one of {', '.join(BENCHMARKS)}", code=2)
    if (shots is not None and shots < 0) or seeds < 1:
        raise _fail("--shots must be >= 0 and --seeds >= 1", code=2)
    command = " ".join(["intent-router", *sys.argv[1:]]) if sys.argv[1:2] == ["bench"] else None

    def save(result: dict) -> None:
        if out:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps({"command": command, **result}, indent=2) + "\n", encoding="utf-8")

    try:
        result = run_benchmark(
            name,
            path,
            shots=shots,
            seeds=seeds,
            max_steps=max_steps,
            batch_size=batch_size,
            base_model=base_model,
            report=lambda m: console.print(f"[dim]{escape(m)}[/]", highlight=False),
            on_seed=save,
        )
    except (BenchmarkDataError, ValueError, FileNotFoundError, RuntimeError) as e:
        raise _fail(str(e))
    save(result)
    t = Table(
        title=f"{name} {f'{shots}-shot' if shots else 'full data'}, {seeds} seed(s), "
        f"{result['hyperparameters']['max_steps']} steps x {result['hyperparameters']['batch_size']} pairs"
    )
    t.add_column("metric")
    t.add_column("mean ± std (min-max)", justify="right")
    for row in format_summary(result):
        t.add_row(*row)
    console.print(t)
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
