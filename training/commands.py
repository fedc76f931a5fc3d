"""The model's life cycle: init, data check, train, export, recover-body, build (eval and the benchmarks:
training/measure_commands.py). Torch is imported only by the commands that train, so init and data
check run without it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from router.console import (
    Opt,
    OutModelDir,
    command,
    console,
    fail,
    say,
    table,
)


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
        + (" (strict: warnings count as errors)" if strict else "")
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
    from training.train import summary_rows
    from training.train import train as train_model

    train_config = _train_config(config, **flags)
    out = out or train_config.output_dir
    manifest = train_model(train_config, out, report=say)
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
    variants: str = Opt(
        "fp32,int8",
        help="Comma-separated: fp32, fp16 (fp32 compute, weights stored in half precision), int8.",
    ),
    keep_fp32: bool = Opt(
        True, "--keep-fp32/--drop-fp32", help="Keep the fp32 graph after the int8 one is made."
    ),
    recipes: str | None = Opt(
        None,
        help="int8 recipes to try, fastest first (default: the build's, training.quantize.DEFAULT_RECIPES); "
        "also rowscaled-int8-keep2/4/6 (docs/speed.md).",
    ),
    require_int8: bool = Opt(
        False,
        "--require-int8",
        help="Fail when no int8 recipe passes parity, instead of making the fp16 graph (else the fp32 one) the default.",
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
    half_int8: bool = Opt(
        False,
        "--half-int8",
        help="The weights the int8 graph keeps in fp32 (the embedding table) stored as float16: a smaller file.",
    ),
) -> None:
    """Export to ONNX (fp32 and int8) with calibrated probabilities and check parity. When no int8 recipe
    passes, the fp16 graph (fp32 compute, half the file) or else the fp32 graph becomes the default variant
    (or, with --require-int8, the export fails)."""
    from router.shipped import default_model_dir
    from training.export import export_model

    names = [v.strip() for v in variants.split(",") if v.strip()]
    tried = [r.strip() for r in recipes.split(",") if r.strip()] if recipes else None
    manifest = export_model(
        model or default_model_dir(),
        parity_file=[str(f) for f in parity_file],
        variants=names,
        keep_fp32=keep_fp32,
        report=say,
        **({"recipes": tried} if tried else {}),
        require_int8=require_int8,
        portable_int8=portable_int8,
        kept_fp32=kept_fp32,
        half_int8=half_int8,
    )
    for name, v in manifest.export.variants.items():
        size, top1 = v.file.bytes / 1e6, v.parity.top1_agreement
        verdict = "passed" if v.parity.passed else "FAILED"
        default = " (default)" if name == manifest.export.default_variant else ""
        console.print(f"{name}{default}: {v.file.path} ({size:.1f} MB), parity top-1 {top1:.4f}, {verdict}")


@command()
def fit_turns(
    model: Annotated[Path | None, Opt(help="Exported model directory (default: the default model).")] = None,
    conversations: Path = Opt(
        Path("data/conversations/train.jsonl"), help="Conversations whose later turns it is fitted on."
    ),
    train_file: Path | None = Opt(
        Path("data/train.jsonl"),
        help="Training rows it is also fitted on (continuations, small talk, requests).",
    ),
    seed: int = Opt(42, help="Seed of the share of requests it reads."),
) -> None:
    """Fit the turn reader of an exported model (router.turn_reader): after a turn, it tells a
    continuation from small talk and from a request of its own. 'build' does this after export; 'export'
    drops a reader fitted on the graph it replaces."""
    from router.shipped import default_model_dir
    from training.turn_reader import fit_turn_reader

    fit_turn_reader(model or default_model_dir(), conversations, train_file, seed=seed, report=say)


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
    from router.shipped import default_model_dir
    from training.libraries import quiet_libraries
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


def print_eval_summary(report: dict) -> None:
    from eval.markdown import per_class_rows, summary_rows

    m, d = report["model"], report["data"]
    title = f"{m['model_id']} ({m['backend']}) on {d['source']} (n={d['n']})"
    table(title, ["metric", "value"], summary_rows(report))
    table("Per class", ["label", "precision", "recall", "F1", "support"], per_class_rows(report))
    console.print(f"{len(report['misclassified'])} misclassified (see report.md)")
