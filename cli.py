"""intent-router command line: one Typer app assembled from the commands beside the code they front.

router/commands.py (route, score, serve, config check, schema: runtime only), eval/commands.py (gate,
bench serve, bench score), training/commands.py (init, data check, train, export, build),
training/data_commands.py (data add) and training/measure_commands.py (eval, bench speed, dataset,
examples, project). Router imports nothing from eval, so this module hands route eval's data loader
for --file and score eval's label metrics for --with-labels.
Each command parses its options, calls one library function and prints. Every error is one line and
a non-zero exit; ``--debug`` shows the traceback, ``--verbose`` lets third-party libraries log at INFO.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from eval import commands as files
from eval import review_commands as queue
from eval.score_labels import decisions_metrics
from router import commands as runtime
from router.console import Opt, set_verbosity
from training import commands as lifecycle
from training import compare_commands as challenger
from training import data_commands as corpus
from training import measure_commands as measure
from training.data_add import held_out


def _read_messages(source: Path) -> list[str]:
    """route --file: eval's data loader, imported only when a file is given."""
    from eval.data import load_messages

    return load_messages(source)


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
app.command("fit-turns")(lifecycle.fit_turns)
app.command("recover-body")(lifecycle.recover_body)
app.command()(runtime.route_command(read_messages=_read_messages))
app.command()(runtime.schema)
app.command("eval")(measure.evaluate)
app.command()(files.gate)
app.command()(queue.review_command(held_out=held_out))
app.command()(challenger.compare)
app.command()(runtime.serve)
app.command()(runtime.score_command(label_metrics=decisions_metrics))
data_app.command("check")(lifecycle.data_check)
data_app.command("add")(corpus.data_add)
config_app.command("check")(runtime.config_check)
bench_app.command("speed")(measure.bench_speed)
bench_app.command("dataset")(measure.bench_dataset)
bench_app.command("examples")(measure.bench_examples)
bench_app.command("project")(measure.bench_project)
bench_app.command("scope")(measure.bench_scope)
bench_app.command("languages")(measure.bench_languages)
bench_app.command("encoders")(measure.bench_encoders)
bench_app.command("serve")(files.bench_serve)
bench_app.command("score")(files.bench_score)


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
