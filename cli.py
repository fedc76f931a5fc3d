"""intent-router command line: one Typer app assembled from the commands beside the code they front.

router/commands.py (serve, config check, schema: runtime only), eval/commands.py (route, score, gate:
files of messages and CI) and training/commands.py (init, data check, train, export, build) and training/measure_commands.py (eval,
bench).
Each command parses its options, calls one library function and prints. Every error is one line and
a non-zero exit; ``--debug`` shows the traceback, ``--verbose`` lets third-party libraries log at INFO.
"""

from __future__ import annotations

import os

import typer

from eval import commands as files
from router import commands as runtime
from router.console import Opt, set_verbosity
from training import commands as lifecycle
from training import measure_commands as measure

app = typer.Typer(
    help="Train, export, evaluate and run an intent router: the shipped five-intent model, or your own.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
data_app = typer.Typer(help="Corpus tools.", no_args_is_help=True)
bench_app = typer.Typer(help="Benchmarks: speed, public intent datasets.", no_args_is_help=True)
config_app = typer.Typer(help="Router config tools.", no_args_is_help=True)
app.add_typer(data_app, name="data")
app.add_typer(bench_app, name="bench")
app.add_typer(config_app, name="config")

app.command()(lifecycle.init)
app.command()(lifecycle.train)
app.command()(lifecycle.export)
app.command()(lifecycle.build)
app.command("recover-body")(lifecycle.recover_body)
app.command()(files.route)
app.command()(runtime.schema)
app.command("eval")(measure.evaluate)
app.command()(files.gate)
app.command()(runtime.serve)
app.command()(files.score)
data_app.command("check")(lifecycle.data_check)
config_app.command("check")(runtime.config_check)
bench_app.command("speed")(measure.bench_speed)
bench_app.command("dataset")(measure.bench_dataset)
bench_app.command("examples")(measure.bench_examples)
bench_app.command("project")(measure.bench_project)


@app.callback()
def _options(
    verbose: bool = Opt(False, "--verbose", "-v", help="Show third-party INFO logs."),
    debug: bool = Opt(False, "--debug", help="Show the traceback of an error."),
) -> None:
    set_verbosity(verbose, debug)


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app()


if __name__ == "__main__":
    main()
