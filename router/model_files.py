"""The files of a model directory that routing reads, read from its manifest: what an install must carry.

Plain JSON and the standard library only, so that the package build (setup.py, which runs before any
dependency is installed) derives the wheel's model files from the same rule the runtime loads by.
Graphs of other variants are not in the list: the router opens one variant, the manifest's default unless
told otherwise, and a runtime install carries that one. Build inputs the manifest records (the teacher's
targets under ``training``) are not model files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"


def _path(entry: Any) -> str | None:
    return entry.get("path") if isinstance(entry, dict) else None


def runtime_files(manifest: dict[str, Any]) -> list[str]:
    """Paths, relative to the model directory, of the manifest and every file routing reads: the
    tokenizer, the default variant's graph, the reference embeddings of intents defined by examples, the
    clause reader and the turn reader."""
    export = manifest.get("export") or {}
    variants = export.get("variants") or {}
    default = variants.get(export.get("default_variant", "int8")) or {}
    compound_reader = (manifest.get("compound") or {}).get("reader") or {}
    found = [
        _path(export.get("tokenizer")),
        _path(default.get("file")),
        _path(export.get("reference")),
        _path(compound_reader.get("file")),
        _path((manifest.get("conversation") or {}).get("file")),
    ]
    return [MANIFEST_NAME, *(p for p in found if p)]


def model_runtime_files(model_dir: str | Path) -> list[str]:
    """runtime_files of the manifest in ``model_dir``."""
    path = Path(model_dir) / MANIFEST_NAME
    return runtime_files(json.loads(path.read_text(encoding="utf-8")))
