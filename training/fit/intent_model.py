"""The training-side model object, scikit-learn style: ``IntentModel(config).fit(texts, labels)``,
``calibrate`` (temperature scaling on held-out rows), ``predict_proba``, ``labels``, ``save``/``load``.

It holds the SetFit model (contrastively fine-tuned sentence-transformer body + logistic head) and its
temperature, and satisfies eval's Predictor protocol, so eval can score it without importing training.
The fitting phases are in training.fit.phases, the compound head and clause reading in
training.fit.compound_reading.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from eval.metrics.calibration import softmax
from router.intents import OUT_OF_SCOPE
from router.manifest import Manifest, ModelError
from training.fit.checkpoints import teacher_body
from training.fit.compound_head import CompoundHead
from training.fit.compound_reading import CompoundReading
from training.fit.distance import InScopeDistance
from training.fit.phases import (
    base_model,
    check_layer_choices,
    contrastive_phase,
    distil_encoder_phase,
    distil_phase,
    label_phase,
    training_arguments,
)
from training.libraries import quiet_libraries
from training.train_config import TrainConfig

Reporter = Callable[[str], None]


class IntentModel(CompoundReading):
    """A SetFit model and its temperature; ``predict_proba`` gives calibrated probabilities."""

    backend = "torch"
    variant = None

    def __init__(
        self,
        config: TrainConfig | None = None,
        *,
        setfit=None,
        temperature: float = 1.0,
        manifest: Manifest | None = None,
        model_id: str | None = None,
    ) -> None:
        self.config = config or TrainConfig()
        self.setfit = setfit
        self.temperature = temperature
        self.temperature_note: str | None = (
            None  # why the temperature was not fitted (training.fit.calibrate)
        )
        self.manifest = manifest
        self.model_id = model_id or (
            f"{manifest.model_id}/torch" if manifest is not None else "unsaved/torch"
        )
        self.fit_seconds: dict[str, float] = {}
        # training.export.recover's note when the teacher was an exported model without its checkpoint
        self.teacher_recovery: dict | None = None
        self.scope: InScopeDistance | None = None
        self.compound: CompoundHead | None = None
        # while ``fit`` fits the heads on the trained body: text -> its embedding, so that the softmax
        # head, the compound head and its clauses encode each distinct text once
        self._fitting: dict[str, np.ndarray] | None = None

    # ------------------------------------------------------------------------------- fitting
    def fit(
        self,
        texts: Sequence[str],
        labels: Sequence[str],
        report: Reporter = print,
        show_progress: bool = True,
        secondary: Sequence[str | None] | None = None,
        body: Sequence[bool] | None = None,
        head_repeats: Sequence[int] | None = None,
        distilled: Sequence[bool] | None = None,
    ) -> IntentModel:
        """The body's training (contrastive, or a distillation, then the optional label phase), then the
        logistic head, with the config's hyperparameters (its file fields are not read). The temperature
        is reset to 1; ``calibrate`` fits it.

        ``secondary`` names the second intent of compound rows (None for single-intent ones). The
        contrastive phase and the softmax head learn from the single-intent rows (the contrastive phase
        only from those ``body`` marks, when given: the config's ``heads_only_file`` rows do not train it;
        ``head_repeats`` counts each row that many times in the softmax head, default once); every row
        trains the compound head (training.fit.compound_head). ``distilled`` marks the rows whose texts a
        distillation learns (default: all; the config's ``label_files`` rows have no teacher's targets);
        the label phase (``label_epochs``) learns from every single-intent row. Tried and dropped: compound
        rows as pair classes in the contrastive phase, and as their primary in the softmax head
        (single-intent accuracy fell, compound recall did not rise)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        texts, labels = list(texts), list(labels)
        secondary, body, repeats = _row_marks(texts, labels, secondary, body, head_repeats)
        distilled = list(distilled) if distilled is not None else [True] * len(texts)
        if len(distilled) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(distilled)} distillation marks")
        labels_in_data = sorted(set(labels))
        if len(labels_in_data) < 2:
            raise ValueError(f"need at least two labels to train, found {labels_in_data}")
        single = [i for i, s in enumerate(secondary) if s is None]
        model, head_params = base_model(self.config, labels_in_data, report)
        body_seconds, distil_seconds = self._train_body(
            model, texts, labels, single, body, head_params, report, show_progress, distilled
        )
        label_seconds = label_phase(
            model, self.config, texts, labels, single, head_params, report, show_progress
        )
        head_rows = [i for i in single for _ in range(repeats[i])]
        t0 = time.perf_counter()
        self.setfit, self.temperature, self._fitting = model, 1.0, {}
        try:
            self.fit_softmax_head([texts[i] for i in head_rows], [labels[i] for i in head_rows])
            head_seconds = time.perf_counter() - t0
            report(f"head fitted: {head_seconds:.1f}s")
            self._fit_distance_and_compound(texts, labels, secondary, labels_in_data, report)
        finally:
            self._fitting = None
        self.fit_seconds = {
            "contrastive": body_seconds,
            "distil": distil_seconds,
            "labels": label_seconds,
            "head": head_seconds,
        }
        return self

    def _train_body(
        self,
        model,
        texts,
        labels,
        single,
        body,
        head_params,
        report: Reporter,
        show_progress: bool,
        distilled,
    ) -> tuple[float, float]:
        """The body's training: the contrastive phase on the single-intent rows ``body`` marks, then, when
        the config names one, distillation from a teacher (its layers, its encoder or its stored targets)
        on the rows ``distilled`` marks. Returns the seconds of each."""
        from datasets import Dataset

        config = self.config
        # an exported teacher without its checkpoint gives the body recovered from its graph (training.export.recover)
        workdir = tempfile.TemporaryDirectory(prefix="teacher-") if config.teacher is not None else None
        teacher, self.teacher_recovery = (
            teacher_body(config.teacher, Path(workdir.name), report) if workdir is not None else (None, None)
        )
        check_layer_choices(config, model)
        ds = Dataset.from_dict({"text": [texts[i] for i in single], "label": [labels[i] for i in single]})
        body_ds = ds.select([k for k, i in enumerate(single) if body[i]])
        with tempfile.TemporaryDirectory(prefix="setfit-") as tmp:
            args = training_arguments(config, tmp)
            _, body_seconds = contrastive_phase(
                model,
                body_ds,
                args,
                config,
                teacher=teacher,
                recovery=self.teacher_recovery,
                workdir=workdir,
                report=report,
                show_progress=show_progress,
            )
            distil_seconds = 0.0
            by_text = {texts[i]: labels[i] for i in single if distilled[i]}
            texts = [t for t, d in zip(texts, distilled, strict=True) if d]
            if config.distil_layers is not None:
                distil_seconds = distil_phase(
                    model, config, texts, by_text, head_params, report, show_progress
                )
            elif teacher is not None or config.teacher_targets is not None:
                # another encoder: the base model's body learns the teacher's (or its stored targets)
                distil_seconds = distil_encoder_phase(
                    model, config, teacher, texts, by_text, head_params, report, show_progress
                )
                if workdir is not None:
                    workdir.cleanup()
        return body_seconds, distil_seconds

    def fit_softmax_head(self, texts: Sequence[str], labels: Sequence[str]) -> None:
        """The logistic head on the body's embeddings of ``texts`` (a row repeated counts that many
        times; while ``fit`` runs, it is encoded once), as SetFit's train_classifier fits it."""
        self.setfit.model_head.fit(self.encode(texts), list(labels))

    def _fit_distance_and_compound(
        self,
        texts: list[str],
        labels: list[str],
        secondary: list[str | None],
        labels_in_data: list[str],
        report: Reporter,
    ) -> None:
        """The parts fitted on the trained body and head: the in-scope distance (on the class means of the
        single-intent rows, when the config asks for it) and, given two-intent rows, the compound head."""
        config = self.config
        self.scope, self.compound = None, None
        in_scope = [l for l in labels_in_data if l != OUT_OF_SCOPE]
        need_emb = (config.in_scope_distance and in_scope) or any(secondary)
        emb = self.encode(texts) if need_emb else None
        if config.in_scope_distance and in_scope:
            t0 = time.perf_counter()
            single = np.array([s is None for s in secondary])  # class means of single-intent rows
            self.scope = InScopeDistance.fit(
                emb[single], np.array(labels)[single], in_scope, shrinkage=config.in_scope_shrinkage
            )
            report(f"in-scope distance fitted on {len(in_scope)} classes: {time.perf_counter() - t0:.1f}s")
        if any(secondary):
            self.fit_compound_head(texts, labels, secondary, emb, report)

    def calibrate(
        self, texts: Sequence[str], labels: Sequence[str], secondary: Sequence[str | None] | None = None
    ) -> float:
        """Fit the temperature on held-out rows (minimum NLL), the in-scope distance threshold on their
        single-intent in-scope rows and the compound threshold on their single-intent rows; returns the
        temperature."""
        from training.fit.calibrate import fit_temperature_or_prior

        secondary = list(secondary) if secondary is not None else [None] * len(labels)
        emb = self.encode(texts)
        logits = self._head_logits(emb)
        single = np.array([s is None for s in secondary])
        # the softmax head is calibrated on single-intent rows: a compound row's primary is not its top
        # label by design (its probability is shared with the second intent)
        ids = self.label_ids(labels)
        self.temperature, self.temperature_note = fit_temperature_or_prior(logits[single], ids[single])
        in_scope = np.array([l != OUT_OF_SCOPE for l in labels]) & single
        if self.scope is not None and in_scope.any():
            self.scope.fit_threshold(emb[in_scope], keep=self.config.in_scope_keep)
        if self.compound is not None:
            self._calibrate_compound(texts, labels, secondary, emb, logits)
        return self.temperature

    @property
    def distance_threshold(self) -> float | None:
        return self.scope.threshold if self.scope is not None else None

    def in_scope_distance(self, texts: Sequence[str]) -> np.ndarray | None:
        """Distance of each message to the nearest in-scope class (None without a fitted distance)."""
        if self.scope is None:
            return None
        return self.scope.distance(self.encode(texts)) if list(texts) else np.zeros(0)

    # ---------------------------------------------------------------------------- predicting
    @property
    def labels(self) -> list[str]:
        """Label order of the head's outputs. SetFit's predict_proba follows ``classes_`` (sorted), not
        ``model.labels``, so this is the one order everything downstream must use."""
        return [str(c) for c in self.setfit.model_head.classes_]

    def label_ids(self, labels: Sequence[str]) -> np.ndarray:
        index = {l: i for i, l in enumerate(self.labels)}
        unseen = sorted(set(labels) - set(index))
        if unseen:
            raise ValueError(f"labels the model was not trained on: {unseen[:5]}")
        return np.array([index[l] for l in labels], dtype=int)

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """The body's sentence embeddings of ``texts`` (while ``fit`` fits the heads, each distinct text
        is encoded once and kept)."""
        texts = list(texts)
        kept = self._fitting
        if kept is None or not texts:
            return self._encode(texts, batch_size)
        todo = list(dict.fromkeys(t for t in texts if t not in kept))
        if todo:
            kept.update(zip(todo, self._encode(todo, batch_size), strict=True))
        return np.stack([kept[t] for t in texts])

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        emb = self.setfit.model_body.encode(
            texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
        )
        return np.asarray(emb, dtype=np.float32)

    def logits(self, texts: Sequence[str]) -> np.ndarray:
        """Raw class scores of the fitted logistic head, in ``labels`` order."""
        return self._head_logits(self.encode(texts))

    def _head_logits(self, embeddings: np.ndarray) -> np.ndarray:
        scores = np.asarray(self.setfit.model_head.decision_function(embeddings), dtype=np.float64)
        if scores.ndim == 1:  # binary head: predict_proba is sigmoid(s) == softmax([0, s])
            scores = np.stack([np.zeros_like(scores), scores], axis=1)
        return scores

    def predict_with_distance(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """(calibrated probabilities, in-scope distances or None) from one encoding pass."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels))), (None if self.scope is None else np.zeros(0))
        emb = self.encode(texts)
        probs = softmax(self._head_logits(emb), self.temperature)
        return probs, (self.scope.distance(emb) if self.scope is not None else None)

    def predict_proba(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, len(self.labels)))
        return softmax(self.logits(texts), self.temperature)

    # ------------------------------------------------------------------------------- storage
    def save(self, directory: str | Path) -> Path:
        self.setfit.save_pretrained(str(directory))
        if self.scope is not None:
            self.scope.save(directory)
        if self.compound is not None:
            self.compound.save(directory)
        return Path(directory)

    @classmethod
    def load(cls, checkpoint: str | Path, manifest: Manifest | None = None) -> IntentModel:
        """A SetFit checkpoint; the temperature comes from ``manifest`` (T = 1 without one)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from setfit import SetFitModel

        quiet_libraries()
        checkpoint = Path(checkpoint)
        cal = manifest.calibration if manifest is not None else None
        model = cls(
            setfit=SetFitModel.from_pretrained(str(checkpoint)),
            temperature=cal.temperature if cal is not None else 1.0,
            manifest=manifest,
            model_id=None if manifest is not None else f"{checkpoint.resolve().name}/torch",
        )
        model.scope = InScopeDistance.load(checkpoint)
        model.compound = CompoundHead.load(checkpoint)
        if manifest is not None and list(manifest.labels) != model.labels:
            raise ModelError(
                f"{checkpoint}: head label order {model.labels} differs from the manifest's {manifest.labels}"
            )
        return model


def _row_marks(texts: list, labels: list, secondary, body, head_repeats) -> tuple[list, list, list]:
    """Each row's second intent (None: single-intent), whether it trains the body, and how often it counts
    in the softmax head, with their defaults; one per text, or a ValueError."""
    secondary = list(secondary) if secondary is not None else [None] * len(texts)
    body = list(body) if body is not None else [True] * len(texts)
    repeats = list(head_repeats) if head_repeats is not None else [1] * len(texts)
    if {len(labels), len(secondary), len(body), len(repeats)} != {len(texts)}:
        raise ValueError(
            f"{len(texts)} texts but {len(labels)} labels / {len(secondary)} secondaries / {len(body)} marks"
            f" / {len(repeats)} repeats"
        )
    if any(r < 1 for r in repeats):
        raise ValueError("head_repeats must be at least 1 for every row")
    return secondary, body, repeats
