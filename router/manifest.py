"""The model manifest: the one description of a model that training writes and router and eval read.

A model directory holds ``manifest.json`` plus the files it lists (ONNX graphs, tokenizer). Every
listed file carries its sha256, so a runtime can refuse a directory whose files were altered.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import math
import platform
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

from router.strict import StrictLoadError, load_json

MANIFEST_NAME = "manifest.json"
SCHEMA_VERSION = 1
MIN_SEQ_LENGTH = 8  # as training allows; a shorter token window cuts ordinary messages to nothing
MAX_SEQ_LENGTH = 8192


class ModelError(Exception):
    """A model directory is missing, incomplete, altered or inconsistent."""


def _confined(path: str) -> str:
    """A path inside the model directory: relative, forward slashes, no '..'."""
    p = PurePosixPath(path)
    if (
        not path
        or "\\" in path
        or ":" in path
        or p.is_absolute()
        or any(part in ("..", "") for part in path.split("/"))
    ):
        raise ValueError(f"file path {path!r} must be relative and stay inside the model directory")
    return path


class FileEntry(BaseModel):
    path: str
    sha256: str
    bytes: int

    _check_path = field_validator("path")(classmethod(lambda cls, v: _confined(v)))


class _Section(BaseModel):
    """A typed manifest section that keeps unknown keys (older and newer manifests load) and serialises
    only what was set, so a manifest round-trips unchanged. Read fields as attributes; the mapping
    methods (``section["key"]``, ``.get``) remain for code written against the untyped dicts."""

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _only_set(self, handler):
        data = handler(self)
        keep = set(self.model_fields_set) | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in keep}

    def __getitem__(self, key: str) -> Any:
        if key in type(self).model_fields or key in (self.model_extra or {}):
            return getattr(self, key)
        raise KeyError(key)

    def __setitem__(self, key: str, value: Any) -> None:
        setattr(self, key, value)

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set or key in (self.model_extra or {})

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        return default

    def keys(self):
        return [k for k in self.model_dump()]

    def items(self):
        return list(self.model_dump().items())


class Hyperparameters(_Section):
    base_model: str | None = None
    seed: int | None = None
    batch_size: int | None = None
    num_epochs: int | None = None
    max_steps: int | None = None
    num_iterations: int | None = None
    sampling_strategy: str | None = None
    body_learning_rate: float | None = None
    warmup_proportion: float | None = None
    max_seq_length: int | None = None
    head_c: float | None = None
    head_max_iter: int | None = None


class TrainingData(_Section):
    files: dict[str, str] = Field(default_factory=dict)  # path -> sha256
    rows: dict[str, int] = Field(default_factory=dict)  # split -> rows
    label_counts: dict[str, int] = Field(default_factory=dict)  # label -> training rows (its prior)


class TrainingInfo(_Section):
    """What ``intent-router train`` records: how, on what and where the model was trained."""

    hyperparameters: Hyperparameters | None = None
    data: TrainingData | None = None
    versions: dict[str, str] = Field(default_factory=dict)
    machine: dict[str, Any] = Field(default_factory=dict)
    seconds: dict[str, float] = Field(default_factory=dict)
    checkpoint: str | None = None
    parity_file: str | None = None


class ClassMetrics(_Section):
    precision: float | None = None
    recall: float | None = None
    f1: float | None = None
    support: int | None = None


class SplitMetrics(_Section):
    """Metrics of the calibrated model on one split (dev, test)."""

    n: int | float | None = None
    accuracy: float | None = None
    ece: float | None = None
    nll: float | None = None
    brier: float | None = None
    macro_f1: float | None = None
    per_class: dict[str, ClassMetrics] | None = None


class Parity(BaseModel):
    """Agreement of an exported graph with the PyTorch model it came from."""

    n: int
    top1_agreement: float
    max_abs_prob_diff: float
    in_scope_agreement: float | None = None  # same side of the in-scope distance threshold
    max_rel_distance_diff: float | None = None
    min_required: float
    passed: bool
    # the same texts classified in length-sorted batches (the route_batch path)
    batched_top1_agreement: float | None = None
    batched_max_abs_prob_diff: float | None = None
    batched_in_scope_agreement: float | None = None
    # the same intents (primary and the compound rule's second intent), single and batched
    intents_agreement: float | None = None
    batched_intents_agreement: float | None = None
    max_abs_score_diff: float | None = None  # one-vs-rest intent scores
    max_abs_prob_diff_allowed: float | None = None
    # top-1 agreement per parity file (split), single and batched, when the text came from several files
    split_top1_agreement: dict[str, float] | None = None
    batched_split_top1_agreement: dict[str, float] | None = None
    # the same for the routed intents; gated per split instead of top-1 when the model has a compound head
    split_intents_agreement: dict[str, float] | None = None
    batched_split_intents_agreement: dict[str, float] | None = None
    # labelled splits: accuracy and ECE of this graph and of the PyTorch model (reference_*)
    quality: dict[str, dict[str, float]] | None = None
    # the machine and its integer dot-product instructions (int8 kernels differ between them), e.g.
    # "x86_64 avx2" or "x86_64 avx512_vnni"
    cpu: str | None = None


class Variant(BaseModel):
    file: FileEntry
    quantization: str | None = None
    parity: Parity | None = None
    recipe: str | None = None  # the int8 recipe kept (training.export.recipes.RECIPES)
    rejected: list[str] = Field(default_factory=list)  # recipes tried first that failed parity, and why
    # encoder nodes a -keepK recipe left out of int8 -> their sensitivity (max |dp| when quantized alone)
    kept_nodes: dict[str, float] = Field(default_factory=dict)
    calibration_texts: int | None = None  # texts of the sensitivity pass or the smoothing


class Calibration(BaseModel):
    method: str = "temperature"
    temperature: float = 1.0

    @field_validator("temperature")
    @classmethod
    def _positive(cls, v: float) -> float:
        if not math.isfinite(v) or v <= 0:
            raise ValueError(f"temperature must be finite and > 0, got {v}")
        return v

    fitted_on: str = "dev"
    before: dict[str, dict[str, float]] = Field(default_factory=dict)
    after: dict[str, dict[str, float]] = Field(default_factory=dict)


class InScope(BaseModel):
    """The distance-based in-scope score the graph computes beside the probabilities: the smallest
    Mahalanobis distance (shared, shrunk covariance) from the body embedding to an in-scope class mean.
    A message farther than ``threshold`` is unlike any training intent and is treated as out of scope."""

    method: str = "mahalanobis"
    output: str = "in_scope_distance"
    classes: list[str]
    shrinkage: float = Field(ge=0, le=1)
    threshold: float = Field(gt=0)
    keep: float = Field(gt=0, le=1, description="Share of dev in-scope messages the threshold keeps.")
    fitted_on: str = "dev"


class ClauseReader(BaseModel):
    """Clauses read inside the message's own graph run instead of a second one: the graph's output
    ``output`` holds the token states of encoder ``layers`` (0 = the embeddings), concatenated; each
    clause's tokens are mean-pooled, L2-normalised and put through the softmax head in ``file``
    (``coef`` (labels, width), ``intercept`` (labels,)), trained to give the probabilities the model
    gives the clause read alone (router.compound.clause_vectors, training.fit.compound_head)."""

    method: str = "in-context"
    output: str = "clause_states"
    layers: list[int] = Field(min_length=1)
    file: FileEntry | None = Field(None, description="Written by export; the router needs it.")


class Compound(BaseModel):
    """How the router finds a compound request's two intents (router.compound.resolve_intents): the
    graph's one-vs-rest intent scores (output ``intent_scores``), the message's clauses classified one by
    one (router.clauses), a stacked score over both, and the end-goal order of each intent pair."""

    method: str = "clauses+one-vs-rest"
    output: str = "intent_scores"
    intents: list[str]
    threshold: float = Field(gt=0, lt=1, description="Stacked score that confirms a clause's intent.")
    whole_threshold: float = Field(
        gt=0, lt=1, description="Stacked score that adds a second intent without two clause intents."
    )
    clause_min: float = Field(gt=0, lt=1, description="Probability a clause's intent needs to count.")
    # the stacker's weights: logit(one-vs-rest), clause max, has clauses
    weights: list[float] = Field(min_length=3, max_length=3)
    bias: float
    # an intent pair ('ACTION+SEARCH') -> its primary (the end goal)
    primary_order: dict[str, str] = Field(default_factory=dict)
    max_single_compound: float = Field(
        ge=0, le=1, description="Share of dev single-intent messages the threshold may call compound."
    )
    fitted_on: str = "dev"
    reader: ClauseReader | None = Field(
        None, description="None: each clause is classified on its own, in a second graph run."
    )


class TurnReaderSpec(BaseModel):
    """The turn reader (router.turn_reader): a softmax head over a message's sentence embedding and log
    probabilities that tells, after a turn, a continuation from small talk and from a request of its own.
    It reads the outputs of graph ``variant``, on which it was fitted (training.fit.turn_reading)."""

    method: str = "softmax over embedding + log probabilities"
    kinds: list[str] = Field(min_length=2)
    features: int = Field(gt=0, description="Embedding width plus the number of labels.")
    file: FileEntry
    variant: str
    rows: dict[str, int] = Field(default_factory=dict, description="Fitting rows per kind.")
    fitted_on: list[str] = Field(default_factory=list)


class Export(BaseModel):
    opset: int
    inputs: list[str] = Field(default_factory=lambda: ["input_ids", "attention_mask"])
    output: str = "probabilities"
    tokenizer: FileEntry
    variants: dict[str, Variant]
    default_variant: str = "int8"
    # intents defined by examples (router.examples): the graph's sentence embedding, and the training
    # data's reference sample their thresholds are fitted against
    embedding_output: str | None = None
    reference: FileEntry | None = None


class Manifest(BaseModel):
    schema_version: int = SCHEMA_VERSION
    name: str
    created_at: str
    labels: list[str] = Field(
        description="Labels in the output order of the graph and of the calibrated head."
    )
    base_model: str
    languages: list[str] | None = Field(
        None,
        description="ISO 639-1 codes of the languages the training text is in (the model card); the router "
        "sends a message in another language to the verifier (router.language). None: not recorded.",
    )
    max_seq_length: int = Field(ge=MIN_SEQ_LENGTH, le=MAX_SEQ_LENGTH)
    pooling: str = "mean"
    normalize: bool = True
    training: TrainingInfo = Field(default_factory=TrainingInfo)
    calibration: Calibration | None = None
    metrics: dict[str, SplitMetrics] = Field(default_factory=dict)
    export: Export | None = None
    in_scope: InScope | None = None
    compound: Compound | None = None
    conversation: TurnReaderSpec | None = None

    @field_validator("labels")
    @classmethod
    def _distinct(cls, v: list[str]) -> list[str]:
        if len(v) < 2 or len(set(v)) != len(v):
            raise ValueError(f"labels must be at least two distinct names, got {v}")
        return v

    @property
    def temperature(self) -> float:
        return self.calibration.temperature if self.calibration is not None else 1.0

    @property
    def digest(self) -> str:
        """12 hex digits of the sha256 of the content, which lists every file's sha256 and the calibration."""
        content = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(content.encode("utf-8")).hexdigest()[:12]

    @property
    def model_id(self) -> str:
        """``name@created_at+digest``: a model whose files were replaced gets another id, manifest or not."""
        return f"{self.name}@{self.created_at}+{self.digest}"

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
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[p] = importlib.metadata.version(p)
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
        data = load_json(path.read_text(encoding="utf-8"), str(path))
    except (StrictLoadError, UnicodeDecodeError) as e:
        raise ModelError(f"{path} is not a valid manifest: {e}") from None
    if not isinstance(data, dict):
        raise ModelError(f"{path} is not a valid manifest: not a JSON object")
    if data.get("schema_version") != SCHEMA_VERSION:
        raise ModelError(
            f"{path}: schema_version {data.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    try:
        return Manifest.model_validate(data)
    except Exception as e:  # pydantic.ValidationError
        raise ModelError(f"{path} is not a valid manifest: {e}") from e


def verify_file(directory: Path, entry: FileEntry) -> Path:
    """Return the file's path after checking it stays inside ``directory`` (symlinks resolved), exists and
    matches its recorded sha256."""
    p = Path(directory) / _confined(entry.path)
    root = Path(directory).resolve()
    with contextlib.suppress(OSError):
        if not p.resolve().is_relative_to(root):
            raise ModelError(f"{p} resolves outside the model directory {root}: refused")
    if not p.is_file():
        raise ModelError(f"{p} is listed in the manifest but missing")
    digest = sha256_file(p)
    if digest != entry.sha256:
        raise ModelError(
            f"{p} does not match the manifest (sha256 {digest[:12]}… != {entry.sha256[:12]}…): "
            "the file was altered or belongs to another export"
        )
    return p
