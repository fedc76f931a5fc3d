"""Commands that train: train, build (the main job: train, calibrate, export, evaluate) and fit-turns.
Torch is imported only inside them, so the CLI starts without it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from eval.reports.summary import print_eval_summary
from router.console import (
    Opt,
    OutModelDir,
    app,
    command,
    console,
    fail,
    say,
    table,
)


def _train_config(config: Path | None, **flags):
    """The training config: ``config``, else the shipped model's (training/configs/default.yaml, when this
    is a source checkout), else the defaults; flags override it."""
    from training.train_config import SHIPPED_CONFIG, TrainConfig

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


@app.command()
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
    from training.fit.train import summary_rows
    from training.fit.train import train as train_model

    train_config = _train_config(config, **flags)
    out = out or train_config.output_dir
    manifest = train_model(train_config, out, report=say)
    table(*summary_rows(manifest))
    console.print(
        f"training time: {manifest.training['seconds']['total']:.1f}s; model written to [bold]{out}[/]"
    )


@app.command()
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


@app.command()
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
    from training.fit.turn_reading import fit_turn_reader

    fit_turn_reader(model or default_model_dir(), conversations, train_file, seed=seed, report=say)
