"""The model manifest: the one description of a model that training writes and router and eval read.

A model directory holds ``manifest.json`` plus the files it lists (ONNX graphs, tokenizer). Every
listed file carries its sha256, so a runtime can refuse a directory whose files were altered.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1


class ModelError(Exception):
    """A model directory is missing, incomplete, altered or inconsistent."""


class FileEntry(BaseModel):
    path: str
    sha256: str
    bytes: int


class Parity(BaseModel):
    """Agreement of an exported graph with the PyTorch model it came from."""

    n: int
    top1_agreement: float
    max_abs_prob_diff: float
    min_required: float
    passed: bool


class Variant(BaseModel):
    file: FileEntry
    quantization: str | None = None
    parity: Parity | None = None


class Calibration(BaseModel):
    method: str = "temperature"
    temperature: float = 1.0
    fitted_on: str = "dev"
    before: dict[str, dict[str, float]] = Field(default_factory=dict)
    after: dict[str, dict[str, float]] = Field(default_factory=dict)


class Export(BaseModel):
    opset: int
    inputs: list[str] = Field(default_factory=lambda: ["input_ids", "attention_mask"])
    output: str = "probabilities"
    tokenizer: FileEntry
    variants: dict[str, Variant]
    default_variant: str = "int8"


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    name: str
    created_at: str
    labels: list[str] = Field(
        description="Labels in the output order of the graph and of the calibrated head."
    )
    base_model: str
    max_seq_length: int
    pooling: str = "mean"
    normalize: bool = True
    training: dict[str, Any] = Field(default_factory=dict)
    calibration: Calibration | None = None
    metrics: dict[str, Any] = Field(default_factory=dict)
    export: Export | None = None

    @property
    def model_id(self) -> str:
        return f"{self.name}@{self.created_at}"

    def save(self, directory: Path) -> Path:
        path = Path(directory) / MANIFEST_NAME
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path


def package_versions(packages: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Installed versions of ``packages`` (missing ones left out) plus the Python version."""
    out = {}
    for p in packages:
        try:
            out[p] = importlib.metadata.version(p)
        except importlib.metadata.PackageNotFoundError:
            pass
    out["python"] = platform.python_version()
    return out


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def file_entry(directory: Path, relpath: str) -> FileEntry:
    p = Path(directory) / relpath
    return FileEntry(path=relpath, sha256=sha256_file(p), bytes=p.stat().st_size)


def load_manifest(directory: str | Path) -> Manifest:
    directory = Path(directory)
    path = directory / MANIFEST_NAME
    if not directory.is_dir():
        raise ModelError(f"model directory not found: {directory}")
    if not path.is_file():
        raise ModelError(
            f"{directory} has no {MANIFEST_NAME}: not a model directory written by intent-router"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ModelError(f"{path} is not valid JSON: {e}") from e
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(
            f"{path}: schema_version {data.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    try:
        return Manifest.model_validate(data)
    except Exception as e:  # pydantic.ValidationError
        raise ModelError(f"{path} is not a valid manifest: {e}") from e


def verify_file(directory: Path, entry: FileEntry) -> Path:
    """Return the file's path after checking it exists and matches its recorded sha256."""
    p = Path(directory) / entry.path
    if not p.is_file():
        raise ModelError(f"{p} is listed in the manifest but missing")
    digest = sha256_file(p)
    if digest != entry.sha256:
        raise ModelError(
            f"{p} does not match the manifest (sha256 {digest[:12]}… != {entry.sha256[:12]}…): "
            "the file was altered or belongs to another export"
        )
    return p
