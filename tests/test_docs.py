"""The documentation matches the code: every training option is in its table with its default, every
relative link resolves inside the repository, and the docs speak of the project, not of its history."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from training.train_config import TrainConfig

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted(
    [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *ROOT.glob("*/README.md"), ROOT / "data/INTENTS.md"]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HISTORY = re.compile(r"session \d|issue #\d|/wor[k]/|/tmp/|scrat[c]h", re.IGNORECASE)  # [k], [c]: not itself


def _default(value) -> str:
    if value is None:
        return "null"
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_every_training_option_is_documented_with_its_default():
    text = (ROOT / "docs/own-intents.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([a-z_0-9]+)` \| `([^`]*)` \|", text, flags=re.MULTILINE))
    fields = TrainConfig.model_fields
    assert sorted(rows) == sorted(fields), "docs/own-intents.md's option table differs from TrainConfig"
    for name, field in fields.items():
        default = field.get_default(call_default_factory=True)
        assert rows[name] == _default(default), f"{name}: documented default {rows[name]!r}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(doc):
    for target in LINK.findall(doc.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (doc.parent / target.split("#", 1)[0]).resolve()
        assert path.is_relative_to(ROOT), f"{doc.name}: {target} leads outside the repository"
        assert path.exists(), f"{doc.name}: {target} does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_speak_of_the_project_not_its_history(doc):
    lines = doc.read_text(encoding="utf-8").splitlines()
    found = [f"{i}: {line.strip()[:80]}" for i, line in enumerate(lines, 1) if HISTORY.search(line)]
    assert not found, f"{doc.name} names sessions, work items or machine paths:\n" + "\n".join(found)


def test_every_command_of_the_app_is_in_the_command_reference():
    """docs/cli.md lists each command the assembled app registers, groups' subcommands included."""
    from typer.main import get_command

    from cli import app

    group = get_command(app)
    names = []
    for name, cmd in group.commands.items():
        subcommands = getattr(cmd, "commands", None)
        names += [f"{name} {sub}" for sub in subcommands] if subcommands else [name]
    reference = (ROOT / "docs/cli.md").read_text(encoding="utf-8")
    assert len(names) >= 26
    assert [n for n in names if f"`intent-router {n}" not in reference] == []


def test_commands_are_registered_by_the_modules_cli_assembles():
    """Each command's function lives in the commands.py of the room it fronts, listed in cli.py."""
    from typer.main import get_command

    import cli

    group = get_command(cli.app)
    modules = set()
    for cmd in group.commands.values():
        for c in getattr(cmd, "commands", {cmd.name: cmd}).values():
            modules.add(c.callback.__wrapped__.__module__)
    assert modules == set(cli.COMMAND_MODULES)
