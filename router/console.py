"""What every intent-router command shares: the consoles, one-line errors, tables and common options.

The one Typer app lives here, with its groups (``data``, ``bench``, ``config``). Each folder's
commands.py registers the commands that front its code on it (``@app.command()``,
``@bench_app.command("speed")``), the way spaCy's command modules register on its shared app; cli.py
imports those modules and runs the app (docs/layout.md).
"""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import Annotated

import click
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

Opt = typer.Option
console = Console(width=None if sys.stdout.isatty() else 140)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 400)
THIRD_PARTY_LOGGERS = (
    *("onnxruntime", "httpx", "httpcore", "datasets", "transformers", "sentence_transformers"),
    *("setfit", "huggingface_hub", "urllib3", "filelock", "torch"),
)
state = {"debug": False, "verbose": False}
OUR_PACKAGES = ("router", "eval", "training")

app = typer.Typer(
    help="Train, export, evaluate and run an intent router: the shipped five-intent model, or your own.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Corpus tools.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: speed, public intent datasets.", no_args_is_help=True)
config_app = typer.Typer(help="Router config tools.", no_args_is_help=True)
tools_app = typer.Typer(help="The tool registry: import tool specs, search them.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
app.add_typer(config_app, name="config")
app.add_typer(tools_app, name="tools")

# Options shared by several commands, declared once.


def _model_option(value: Path | None) -> Path | None:
    """--model takes a folder or a shipped model's name (router.shipped)."""
    from router.shipped import resolve_model_dir

    return None if value is None else resolve_model_dir(value)


ModelDir = Annotated[
    Path | None,
    Opt(
        "--model",
        callback=_model_option,
        help="Exported model directory, or a shipped model's name: intent-minilm, intent-minilm-fast "
        "(default: $INTENT_ROUTER_MODEL or intent-minilm).",
    ),
]
OutModelDir = Annotated[
    Path | None,
    Opt(
        "--out",
        help="Model directory to write (default: models/<the config's name>, in the working directory).",
    ),
]
RouterConfigFile = Annotated[
    Path | None, Opt("--config", help="Router config YAML (skills, roles, threshold).")
]
Threshold = Annotated[float | None, Opt(help="Override the confidence threshold, in (0, 1].")]
VerifierURL = Annotated[
    str | None,
    Opt(
        envvar="INTENT_ROUTER_VERIFIER_URL", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:11434/v1"
    ),
]
VerifierModel = Annotated[
    str | None, Opt(envvar="INTENT_ROUTER_VERIFIER_MODEL", help="Model name for the verifier.")
]
VerifierTimeout = Annotated[
    float | None, Opt(help="Seconds per verifier HTTP request (the total deadline defaults to twice this).")
]
TextColumn = Annotated[str, Opt(help="Column holding the message.")]


def set_verbosity(verbose: bool, debug: bool) -> None:
    """Third-party INFO logs only with --verbose; tracebacks only with --debug."""
    state.update(debug=debug, verbose=verbose)
    level = logging.INFO if verbose else logging.WARNING
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(level)


@app.callback()
def _options(
    verbose: bool = Opt(False, "--verbose", "-v", help="Show third-party INFO logs."),
    debug: bool = Opt(False, "--debug", help="Show the traceback of an error."),
) -> None:
    set_verbosity(verbose, debug)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print one error line; the caller raises the returned Exit."""
    lines = [l.strip() for l in str(message).splitlines() if l.strip()]
    err_console.print(f"[bold red]error:[/] {escape('; '.join(lines) or 'failed')}", highlight=False)
    return typer.Exit(code)


def command(extra: str | None = None):
    """One line and exit 1 for any error (usage errors exit 2); the traceback only with --debug.

    ``extra`` names the pip extra whose absence an ImportError means (serve, scale).
    """

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, click.exceptions.Exit, click.ClickException, click.Abort):
                raise
            except Exception as e:
                if state["debug"]:
                    raise
                if isinstance(e, ImportError) and extra:
                    raise fail(f"{e}; install with: pip install '.[{extra}]'") from None
                known = (
                    type(e).__name__.endswith("Error") and type(e).__module__.split(".")[0] in OUR_PACKAGES
                )
                detail = str(e) or type(e).__name__
                ours = known or isinstance(e, ValueError)
                raise fail(detail if ours else f"{type(e).__name__}: {detail}") from e

        return wrapper

    return decorate


def say(message: str) -> None:
    """Progress for people: dim, never parsed."""
    console.print(f"[dim]{escape(message)}[/]", highlight=False)


def table(title: str, header: list[str], rows: list[list]) -> None:
    t = Table(title=title)
    for i, h in enumerate(header):
        t.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        t.add_row(*[escape(str(c)) for c in r])
    console.print(t)


def make_verifier(url: str | None, model: str | None, timeout: float | None, config=None):
    """The verifier for a base URL, or None without one (router.verifier.factory)."""
    from router.verifier.factory import build_verifier

    return build_verifier(url, model, timeout, config)
