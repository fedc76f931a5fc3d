"""The model's life cycle: data check, train, export, build, eval, bench. Torch is imported only by the
commands that train or time PyTorch, so data check and eval of an exported model run without it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import (
    Opt,
    OutModelDir,
    RouterConfigFile,
    TextColumn,
    command,
    console,
    fail,
    make_verifier,
    say,
    table,
)
from training.benchmarks import DEFAULT_IN_SCOPE_FLOOR


@command()
def init(
    directory: Path = typer.Argument(..., help="Directory of the new project (created if missing)."),
    force: bool = Opt(False, "--force", help="Write into a directory that holds files."),
) -> None:
    """Scaffold a project of your own intents: router config, training config, a labelled corpus of three
    example intents and a README of next steps."""
    from training.project import init_project

    written = init_project(directory, force=force)
    for path in written:
        say(f"wrote {path}")
    console.print(
        f"project ready in [bold]{escape(str(directory))}[/]: see {escape(str(directory / 'README.md'))}"
    )


@command()
def data_check(
    paths: list[Path] = typer.Argument(None, help="JSONL files or directories (default: data/)."),
    strict: bool = Opt(False, "--strict", help="Treat duplicates within a split as errors too."),
    as_json: Annotated[bool, Opt("--json", help="Print the report as JSON.")] = False,
    max_issues: int = Opt(50, help="How many issues to print (all go into --json)."),
) -> None:
    """Validate corpus files: JSON, labels, empty text, duplicates and train/dev/test leakage."""
    from training.corpus import check_files

    report = check_files(paths or [Path("data")])
    errors = report.errors + (report.warnings if strict else [])
    if as_json:
        print(json.dumps(report.to_dict(), indent=2))
        raise typer.Exit(1 if errors else 0)
    for issue in report.issues[:max_issues]:
        console.print(f"[{'red' if issue in errors else 'yellow'}]{escape(str(issue))}[/]", highlight=False)
    if len(report.issues) > max_issues:
        console.print(f"... {len(report.issues) - max_issues} more (use --json for all)")
    for title, header, rows in report.tables():
        table(title, header, rows)
    console.print(
        f"{len(report.files)} file(s), {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        + (" [strict: warnings count as errors]" if strict else "")
    )
    raise typer.Exit(1 if errors else 0)


def _train_config(config: Path | None, **flags):
    """The training config: ``config``, else the shipped model's (training/configs/default.yaml, when this
    is a source checkout), else the defaults; flags override it."""
    from training.config import SHIPPED_CONFIG, TrainConfig

    overrides = {k: v for k, v in flags.items() if v is not None}
    if config is None and SHIPPED_CONFIG.is_file():
        config = SHIPPED_CONFIG
    try:
        return TrainConfig.from_file(config, **overrides) if config else TrainConfig(**overrides)
    except (OSError, ValueError) as e:
        raise fail(f"invalid training config: {e}") from e


TrainConfigFile = Annotated[
    Path | None, Opt("--config", help="YAML/JSON file of training options; flags override it.")
]


@command()
def train(
    out: OutModelDir = None,
    config: TrainConfigFile = None,
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

    out = out or default_model_dir()
    manifest = train_model(_train_config(config, **flags), out, report=say)
    table(*summary_rows(manifest))
    console.print(
        f"training time: {manifest.training['seconds']['total']:.1f}s; model written to [bold]{out}[/]"
    )


@command()
def export(
    model: Annotated[
        Path | None, Opt(help="Model directory written by 'train' (default: the default model).")
    ] = None,
    parity_file: list[Path] = Opt(
        [Path("data/test.jsonl")],
        help="Held-out JSONL for the parity check; repeat for several files (each also gated on its own).",
    ),
    variants: str = Opt("fp32,int8", help="Comma-separated: fp32, int8."),
    keep_fp32: bool = Opt(
        True, "--keep-fp32/--drop-fp32", help="Keep the fp32 graph after the int8 one is made."
    ),
    recipes: str = Opt(
        "rowscaled-int8,fused-nbits8-b32,nbits8-b32",
        help="int8 recipes to try, fastest first; also rowscaled-int8-keep2/4/6 (docs/speed.md).",
    ),
    require_int8: bool = Opt(
        False,
        "--require-int8",
        help="Fail when no int8 recipe passes parity, instead of making the fp32 graph the default.",
    ),
    portable_int8: bool = Opt(
        False,
        "--portable-int8",
        help="7-bit weights in the rowscaled recipes: the same results on CPUs without VNNI (docs/speed.md).",
    ),
    kept_fp32: bool = Opt(
        False,
        "--kept-fp32",
        help="The MatMuls a -keepK recipe keeps out of int8 stay fp32, not MatMulNBits: faster without VNNI.",
    ),
) -> None:
    """Export to ONNX (fp32 and int8) with calibrated probabilities and check parity. When no int8 recipe
    passes, the fp32 graph becomes the default variant (or, with --require-int8, the export fails)."""
    from router.routing import default_model_dir
    from training.export import export_model

    names = [v.strip() for v in variants.split(",") if v.strip()]
    tried = [r.strip() for r in recipes.split(",") if r.strip()]
    manifest = export_model(
        model or default_model_dir(),
        parity_file=[str(f) for f in parity_file],
        variants=names,
        keep_fp32=keep_fp32,
        report=say,
        recipes=tried,
        require_int8=require_int8,
        portable_int8=portable_int8,
        kept_fp32=kept_fp32,
    )
    for name, v in manifest.export.variants.items():
        size, top1 = v.file.bytes / 1e6, v.parity.top1_agreement
        verdict = "passed" if v.parity.passed else "FAILED"
        default = " (default)" if name == manifest.export.default_variant else ""
        console.print(f"{name}{default}: {v.file.path} ({size:.1f} MB), parity top-1 {top1:.4f}, {verdict}")


@command()
def recover_body(
    model: Annotated[Path | None, Opt(help="Exported model directory (default: the default model).")] = None,
    out: Path = Opt(..., help="Folder to write the body to (a sentence-transformers model)."),
    variant: str | None = Opt(
        None, help="Graph to read: fp32 or int8 (default: fp32 when its file is there)."
    ),
    base_model: str | None = Opt(
        None, help="Architecture to load it into (default: the manifest's base model)."
    ),
    heads: bool = Opt(
        False,
        "--heads/--body-only",
        help="Also read the heads back (logistic, in-scope distance, compound): the checkpoint the model's "
        "build would have left, which gives the graph's outputs in PyTorch and which 'export' can export "
        "again (put it in the model's checkpoint/).",
    ),
) -> None:
    """Read a trainable body back from an exported graph, for a model that ships without its checkpoint:
    quantized weights come back dequantized. A build names the model as 'teacher' and does this itself."""
    from router.routing import default_model_dir
    from training.model import quiet_libraries
    from training.readback import recover_model
    from training.recover import recover_body as recover

    quiet_libraries()
    read = recover_model if heads else recover
    note = read(model or default_model_dir(), out, variant=variant, base_model=base_model, report=say)
    what = "the model's checkpoint" if heads else "the body"
    console.print(
        f"wrote [bold]{out}[/] ({what}): {note['weights']} weights from {note['graph']}, {note['dequantized']} "
        f"dequantized; embeddings against the graph's: cosine >= {note['min_cosine']:.6f}"
    )


@command()
def build(
    out: OutModelDir = None,
    config: TrainConfigFile = None,
    report_dir: Path = Opt(Path("reports/build"), help="Where the evaluation report goes."),
    oos: Path = Opt(Path("data/oos.jsonl"), help="Out-of-scope file for the evaluation, if it exists."),
) -> None:
    """The main job: train on data/, calibrate, export fp32+int8 with parity, evaluate the int8 router."""
    from training.pipeline import build as run_build

    manifest, report = run_build(_train_config(config), out, report_dir=report_dir, oos=oos, report=say)
    console.print(f"built [bold]{manifest.model_id}[/]")
    if report is not None:
        print_eval_summary(report)
        console.print(f"report written to [bold]{report_dir}[/]")


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
    out: Path = Opt(Path("reports/eval"), help="Directory for eval.json, report.md and the PNG plots."),
    config: RouterConfigFile = None,
    threshold: Annotated[float | None, Opt(help="tau (default: the router config's, 0.75).")] = None,
    variant: str | None = Opt(None, help="ONNX graph: int8 (default) or fp32."),
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
) -> dict:
    """Evaluate a model: metrics, calibration, threshold sweep, out-of-scope recall, compound requests, latency; write the report."""
    options = {
        k: v for k, v in locals().items() if not k.startswith("verifier_") and k not in ("model", "data")
    }
    from training.pipeline import evaluate_model  # after locals() is read

    verifier = make_verifier(verifier_url, verifier_model, None, config)
    name = f"{verifier_model or 'default'} @ {verifier_url}" if verifier else None
    report = evaluate_model(
        model, data, verifier=verifier, verifier_max=verifier_max, verifier_name=name, **options
    )
    print_eval_summary(report)
    console.print(f"report written to [bold]{out}[/] (eval.json, report.md, PNG plots)")
    return report


def print_eval_summary(report: dict) -> None:
    from eval.markdown import per_class_rows, summary_rows

    m, d = report["model"], report["data"]
    title = f"{m['model_id']} ({m['backend']}) on {d['source']} (n={d['n']})"
    table(title, ["metric", "value"], summary_rows(report))
    table("Per class", ["label", "precision", "recall", "F1", "support"], per_class_rows(report))
    console.print(f"{len(report['misclassified'])} misclassified (see report.md)")


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
    from eval.bench_speed import comparison_lines, goal_lines, table_rows
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


@command()
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
    in_scope_floor: float = Opt(
        DEFAULT_IN_SCOPE_FLOOR,
        min=0.0,
        max=1.0,
        help="With --oos-class: the operating point (distance keep, probability tau) is the one with the best "
        "val out-of-scope recall whose val in-scope accuracy is at least this.",
    ),
) -> dict:
    """Train on a public benchmark (k-shot or full) per seed; report test accuracy mean ± std, and out-of-scope recall for CLINC150."""
    from training.benchmarks import BENCHMARKS, format_summary, run_benchmark

    if name not in BENCHMARKS:
        raise fail(f"--name must be one of {', '.join(BENCHMARKS)}", code=2)
    if (shots is not None and shots < 0) or seeds < 1:
        raise fail("--shots must be >= 0 and --seeds >= 1", code=2)
    command = " ".join(["intent-router", *sys.argv[1:]]) if "bench" in sys.argv[1:3] else None
    result = run_benchmark(
        *(name, path),
        **dict(shots=shots, seeds=seeds, max_steps=max_steps, batch_size=batch_size, base_model=base_model),
        **dict(report=say, out=out, command=command, oos_class=oos_class, in_scope_floor=in_scope_floor),
    )
    hp = result["hyperparameters"]
    kind = f"{shots}-shot" if shots else "full data"
    title = f"{name} {kind}, {seeds} seed(s), {hp['max_steps']} steps x {hp['batch_size']} pairs"
    table(title, ["metric", "mean ± std (min-max)"], format_summary(result))
    if out:
        console.print(f"results written to [bold]{out}[/]")
    return result
