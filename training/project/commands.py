"""`intent-router init`: a project of one's own intents to start from (training.project.scaffold)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from router.console import (
    Opt,
    app,
    command,
    console,
    say,
)


@app.command()
@command()
def init(
    directory: Path = typer.Argument(..., help="Directory of the new project (created if missing)."),
    force: bool = Opt(False, "--force", help="Write into a directory that holds files."),
) -> None:
    """Scaffold a project of your own intents: router config, training config, a labelled corpus of three
    example intents and a README of next steps."""
    from training.project.scaffold import init_project

    written = init_project(directory, force=force)
    for path in written:
        say(f"wrote {path}")
    console.print(
        f"project ready in [bold]{escape(str(directory))}[/]: see {escape(str(directory / 'README.md'))}"
    )
