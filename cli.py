"""intent-router command line: the one Typer app (router.console.app), with the commands each folder
registers on it beside the code they front (docs/layout.md lists them).

Importing a folder's commands.py registers its commands; this module imports them all and hands two
runtime commands and `review` what they borrow from a layer above them: router uses nothing of eval's
and eval nothing of training's, so ``route --file`` gets eval's data loader, ``score --with-labels``
eval's metrics of a decisions file, and ``review`` training's test of what the corpus holds out.
Each command parses its options, calls one library function and prints. Every error is one line and
a non-zero exit; ``--debug`` shows the traceback, ``--verbose`` lets third-party libraries log at INFO.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from router.console import app

COMMAND_MODULES = (
    "training.project.commands",  # init
    "training.corpus.commands",  # data check, data add
    "training.fit.commands",  # train, build, fit-turns
    "training.export.commands",  # export, recover-body
    "training.measure.commands",  # eval, bench speed
    "eval.reports.commands",  # gate
    "eval.compare.commands",  # compare, replay
    "eval.review.commands",  # review
    "router.commands",  # route, serve, score, schema, config check
    "router.tools.commands",  # tools import, tools search
    "eval.bench.commands",  # bench serve, bench score, bench languages
    "training.benchmarks.commands",  # bench dataset, scope, examples, project, encoders
)
"""Each registers its commands on the app when imported; `intent-router --help` lists them in this order."""
commands = {name: importlib.import_module(name) for name in COMMAND_MODULES}


def _read_messages(source: Path) -> list[str]:
    """route --file: eval's data loader, imported only when a file is given."""
    from eval.readers.loader import load_messages

    return load_messages(source)


def _decisions_metrics(decisions: Path, labels) -> dict:
    """score --with-labels: eval's metrics of the decisions file."""
    from eval.metrics.scored_logs import decisions_metrics

    return decisions_metrics(decisions, labels)


def _held_out(data_dir: Path):
    """review: which messages the corpus's evaluation files hold, as `data add` reads them."""
    from training.corpus.merge import held_out

    return held_out(data_dir)


commands["router.commands"].extensions.read_messages = _read_messages
commands["router.commands"].extensions.label_metrics = _decisions_metrics
commands["eval.review.commands"].extensions.held_out = _held_out


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    app()


if __name__ == "__main__":
    main()
