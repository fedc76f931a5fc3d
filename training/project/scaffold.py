"""``intent-router init DIR``: a project of one's own intents to start from.

It copies training/project_template: a router config whose intents carry their descriptions and skills,
a training config, a labelled corpus of three made-up intents (an online shop's support agent) with
out-of-scope messages, and a README of next steps. The project trains, evaluates, gates, routes, serves
and scores with the same commands as the shipped model, run from its directory.
"""

from __future__ import annotations

import shutil
from pathlib import Path

TEMPLATE = Path(__file__).resolve().parent / "template"


def init_project(target: str | Path, force: bool = False) -> list[Path]:
    """Write the project template into ``target`` and return the files written. A ``target`` that
    holds files is refused unless ``force``, and then only the template's files are overwritten."""
    target = Path(target)
    if target.exists() and not target.is_dir():
        raise FileExistsError(f"{target} exists and is not a directory")
    if target.is_dir() and any(target.iterdir()) and not force:
        raise FileExistsError(f"{target} is not empty; pass --force to write the project files into it")
    files = sorted(p for p in TEMPLATE.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    if not files:
        raise FileNotFoundError(f"the project template is missing: {TEMPLATE}")
    written = []
    for src in files:
        dst = target / src.relative_to(TEMPLATE)
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        written.append(dst)
    return written
