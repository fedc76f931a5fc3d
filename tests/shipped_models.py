"""The shipped models as committed, whatever `intent-router build` has since written to models/.

`build` retrains models/intent-minilm in place (and adds its checkpoint and fp32 graph), so tests that
check the shipped models read the committed files: the folder itself when it holds exactly what git
has at HEAD, else a copy of HEAD's files under .pytest_cache/. Without git (a source archive), the
folder is used as it is."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> bytes:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, check=True).stdout


def committed(rel: str) -> Path:
    """models/<name> as committed at HEAD (see the module docstring)."""
    here = ROOT / rel
    try:
        tree = _git("rev-parse", f"HEAD:{rel}").decode().strip()
        names = _git("ls-tree", "-r", "--name-only", "HEAD", "--", f"{rel}/").decode().split()
    except (OSError, subprocess.CalledProcessError):
        return here
    files = [n[len(rel) + 1 :] for n in names]
    present = (
        sorted(p.relative_to(here).as_posix() for p in here.rglob("*") if p.is_file())
        if here.is_dir()
        else []
    )
    if present == sorted(files) and not _git("status", "--porcelain", "--", rel).strip():
        return here
    copy = ROOT / ".pytest_cache" / "committed-models" / tree / rel
    if not copy.is_dir():
        copy.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=copy.parent))
        for name in files:
            (staging / name).parent.mkdir(parents=True, exist_ok=True)
            (staging / name).write_bytes(_git("show", f"HEAD:{rel}/{name}"))
        try:
            os.replace(staging, copy)  # atomic: parallel workers see all of it or none
        except OSError:  # another worker got there first
            shutil.rmtree(staging, ignore_errors=True)
    return copy
