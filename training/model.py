"""The training-side model object, scikit-learn style: ``IntentModel(config).fit(texts, labels)``,
``calibrate`` (temperature scaling on held-out rows), ``predict_proba``, ``labels``, ``save``/``load``.

It holds the SetFit model (contrastively fine-tuned sentence-transformer body + logistic head) and its
temperature, and satisfies eval's Predictor protocol, so eval can score it without importing training.
``load_predictor`` opens any model for evaluation: an exported directory (ONNX) or a SetFit checkpoint.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from eval.calibration import softmax
from router.clauses import split_clauses
from router.compound import best_by_label, classify_clauses, clause_vectors, read_in_context, resolve_batch
from router.intents import OUT_OF_SCOPE, intents_of
from router.manifest import MANIFEST_NAME, Manifest, ModelError, load_manifest
from training.compound_head import CompoundHead, fit_clause_reader
from training.config import TrainConfig, resolve_base_model
from training.scope import InScopeDistance

CHECKPOINT_DIR = "checkpoint"
BACKENDS = ("auto", "onnx", "torch")
Reporter = Callable[[str], None]


def set_seed(seed: int) -> None:
    import torch
    from transformers import set_seed as hf_set_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    hf_set_seed(seed)


def quiet_libraries() -> None:
    """setfit sets its loggers to INFO on import and the HF libraries draw tqdm bars; we report ourselves."""
    import datasets
    from setfit import logging as setfit_logging
    from transformers.utils import logging as hf_logging

    setfit_logging.set_verbosity_error()
    warnings.filterwarnings("ignore", message=".*pin_memory.*")
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    datasets.disable_progress_bars()


class IntentModel:
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
        self.manifest = manifest
        self.model_id = model_id or (
            f"{manifest.model_id}/torch" if manifest is not None else "unsaved/torch"
        )
        self.fit_seconds: dict[str, float] = {}
        # training.recover's note when the teacher was an exported model without its checkpoint
        self.teacher_recovery: dict | None = None
        self.scope: InScopeDistance | None = None
        self.compound: CompoundHead | None = None

    # ------------------------------------------------------------------------------- fitting
    def fit(
        self,
        texts: Sequence[str],
        labels: Sequence[str],
        report: Reporter = print,
        show_progress: bool = True,
        secondary: Sequence[str | None] | None = None,
    ) -> IntentModel:
        """Contrastive body fine-tuning, then the logistic head, with the config's hyperparameters (its
        file fields are not read). The temperature is reset to 1; ``calibrate`` fits it.

        ``secondary`` names the second intent of compound rows (None for single-intent ones). The body and
        the softmax head learn from the single-intent rows; every row trains the compound head
        (training.compound_head). Tried and dropped: compound rows as pair classes in the contrastive
        phase, and as their primary in the softmax head (single-intent accuracy fell, compound recall
        did not rise)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        config = self.config
        texts, labels = list(texts), list(labels)
        secondary = list(secondary) if secondary is not None else [None] * len(texts)
        if len(texts) != len(labels) or len(secondary) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels / {len(secondary)} secondaries")
        labels_in_data = sorted(set(labels))
        if len(labels_in_data) < 2:
            raise ValueError(f"need at least two labels to train, found {labels_in_data}")

        from datasets import Dataset
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )
        from setfit import SetFitModel, Trainer, TrainingArguments

        quiet_libraries()

        set_seed(config.seed)
        base = resolve_base_model(config.base_model)
        report(f"base model: {base}")
        head_params = {"C": config.head_c, "max_iter": config.head_max_iter}
        model = SetFitModel.from_pretrained(base, labels=labels_in_data, head_params=head_params)
        model.model_body.max_seq_length = config.max_seq_length
        # an exported teacher without its checkpoint gives the body recovered from its graph (training.recover)
        workdir = tempfile.TemporaryDirectory(prefix="teacher-") if config.teacher is not None else None
        teacher, self.teacher_recovery = (
            teacher_body(config.teacher, Path(workdir.name), report) if workdir is not None else (None, None)
        )
        if config.distil_layers is not None:  # fail now, not after the contrastive phase
            from training.distil import check_ffn_width, check_layers

            check_layers(config.distil_layers, len(model.model_body[0].auto_model.encoder.layer))
            if config.distil_ffn_width is not None:
                check_ffn_width(
                    config.distil_ffn_width, model.model_body[0].auto_model.config.intermediate_size
                )
        if config.clause_context_layers is not None:  # the same, for the body the heads will sit on
            depth = len(config.distil_layers or model.model_body[0].auto_model.encoder.layer)
            check_reader_layers(config.clause_context_layers, depth)

        single = [i for i, s in enumerate(secondary) if s is None]
        ds = Dataset.from_dict({"text": [texts[i] for i in single], "label": [labels[i] for i in single]})
        with tempfile.TemporaryDirectory(prefix="setfit-") as tmp:
            args = TrainingArguments(
                output_dir=tmp,
                batch_size=config.batch_size,
                num_epochs=config.num_epochs,
                max_steps=config.max_steps,
                num_iterations=config.num_iterations,
                sampling_strategy=config.sampling_strategy,
                body_learning_rate=config.body_learning_rate,
                warmup_proportion=config.warmup_proportion,
                max_length=config.max_seq_length,
                seed=config.seed,
                report_to="none",
                save_strategy="no",
                logging_strategy="no",
                show_progress_bar=False,
            )
            with Progress(
                TextColumn("contrastive steps"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                disable=not show_progress or teacher is not None,
            ) as progress:
                task = progress.add_task("train", total=None)
                trainer = Trainer(
                    model=model,
                    args=args,
                    train_dataset=ds,
                    callbacks=[_progress_callback(progress, task, report, config.batch_size)],
                )
                from transformers.trainer_callback import PrinterCallback, ProgressCallback

                trainer.st_trainer.remove_callback(ProgressCallback)  # rich bar / our lines instead of tqdm
                trainer.st_trainer.remove_callback(PrinterCallback)
                if config.length_buckets:
                    from training.batching import LengthBucketBatchSampler

                    trainer.st_trainer.args.batch_sampler = LengthBucketBatchSampler
                t0 = time.perf_counter()
                body_ds = _contrastive_rows(ds, config.contrastive_oos_rows, config.seed)
                if teacher is None:
                    trainer.train_embeddings(*trainer.dataset_to_parameters(body_ds), args=args)
                else:  # the set-up above runs either way: models/intent-minilm-fast was built through it
                    _load_body(model.model_body, teacher)
                    workdir.cleanup()
                body_seconds = time.perf_counter() - t0
            report(
                f"teacher's body loaded from {config.teacher if self.teacher_recovery else teacher}"
                f"{' (recovered from its graph)' if self.teacher_recovery else ''}: {body_seconds:.1f}s"
                if teacher
                else f"contrastive phase: {body_seconds:.1f}s"
            )
            distil_seconds = 0.0
            if config.distil_layers is not None:
                from training.distil import distil_body

                t0 = time.perf_counter()
                model.model_body = distil_body(
                    model.model_body,
                    config.distil_layers,
                    # the messages and their clauses, which the router reads too: distilled on the two-intent
                    # rows' clauses only, the student agreed with the teacher on 86% of single messages'
                    # clauses (98% of the distilled ones), and its compound recall fell from 87% to 68%
                    texts + [c for t in texts for c in split_clauses(t)],
                    epochs=config.distil_epochs,
                    learning_rate=config.distil_learning_rate,
                    batch_size=config.distil_batch_size,
                    seed=config.seed,
                    hidden_weight=config.distil_hidden_weight,
                    freeze_embeddings=config.distil_freeze_embeddings,
                    dropout=config.distil_dropout,
                    clause_weight=config.distil_clause_weight,
                    labels={texts[i]: labels[i] for i in single},
                    head_weight=config.distil_head_weight,
                    head_params=head_params,
                    ffn_width=config.distil_ffn_width,
                    report=report,
                    show_progress=show_progress,
                )
                distil_seconds = time.perf_counter() - t0
                report(f"distilled into encoder layers {config.distil_layers}: {distil_seconds:.1f}s")
            t0 = time.perf_counter()
            trainer.train_classifier(*trainer.dataset_to_parameters(ds), args=args)
            head_seconds = time.perf_counter() - t0
        report(f"head fitted: {head_seconds:.1f}s")
        self.setfit, self.temperature = model, 1.0
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
        self.fit_seconds = {"contrastive": body_seconds, "distil": distil_seconds, "head": head_seconds}
        return self

    def fit_compound_head(
        self,
        texts: Sequence[str],
        labels: Sequence[str],
        secondary: Sequence[str | None],
        emb: np.ndarray | None = None,
        report: Reporter = print,
    ) -> CompoundHead:
        """Fit the compound head (training.compound_head) on the current body and softmax head, with the
        in-context clause reader when the config names its layers; ``calibrate`` then fits its threshold.
        Part of ``fit``; callable on its own to refit the head of a loaded checkpoint."""
        config = self.config
        t0 = time.perf_counter()
        texts = list(texts)
        emb = self.encode(texts) if emb is None else emb
        split = [split_clauses(t) for t in texts]
        clause_probs = classify_clauses(split, self.labels, self.predict_proba)
        reader = None
        if config.clause_context_layers:  # the stacker learns from the reader's cross-fitted clauses
            layers = list(config.clause_context_layers)
            check_reader_layers(layers, len(self.setfit.model_body[0].auto_model.encoder.layer))
            targets = [np.array([[r[k] for k in self.labels] for r in rows]) for rows in clause_probs]
            coef, intercept, crossed = fit_clause_reader(
                self.clause_vectors(texts, split, layers),
                targets,
                l2=config.clause_reader_l2,
                seed=config.seed,
            )
            clause_probs = [[dict(zip(self.labels, map(float, p), strict=True)) for p in m] for m in crossed]
            reader = (layers, coef, intercept)
        clause_best = [best_by_label(rows) for rows in clause_probs]
        order = [*(config.intents or []), *sorted(intents_of(self.labels))]
        head = CompoundHead.fit(
            emb,
            _label_sets(labels, secondary),
            clause_best,
            list(dict.fromkeys(i for i in order if i in self.labels)),
            c=config.compound_head_c,
            seed=config.seed,
        )
        if reader is not None:
            head.reader_layers, head.reader_coef, head.reader_intercept = reader
        self.compound = head
        report(
            f"compound head fitted on {sum(map(bool, secondary))} two-intent rows"
            + (f", clauses read in context from layers {reader[0]}" if reader else "")
            + f": {time.perf_counter() - t0:.1f}s"
        )
        return head

    def calibrate(
        self, texts: Sequence[str], labels: Sequence[str], secondary: Sequence[str | None] | None = None
    ) -> float:
        """Fit the temperature on held-out rows (minimum NLL), the in-scope distance threshold on their
        single-intent in-scope rows and the compound threshold on their single-intent rows; returns the
        temperature."""
        from training.calibrate import fit_temperature

        secondary = list(secondary) if secondary is not None else [None] * len(labels)
        emb = self.encode(texts)
        logits = self._head_logits(emb)
        single = np.array([s is None for s in secondary])
        # the softmax head is calibrated on single-intent rows: a compound row's primary is not its top
        # label by design (its probability is shared with the second intent)
        ids = self.label_ids(labels)
        self.temperature = fit_temperature(logits[single], ids[single])
        in_scope = np.array([l != OUT_OF_SCOPE for l in labels]) & single
        if self.scope is not None and in_scope.any():
            self.scope.fit_threshold(emb[in_scope], keep=self.config.in_scope_keep)
        if self.compound is not None:
            primaries = [self.labels[i] for i in logits.argmax(axis=1)]
            self.compound.fit_threshold(
                primaries,
                self.compound.scores(emb),
                self.clause_probabilities(texts),
                _label_sets(labels, secondary),
                max_single_compound=self.config.compound_max_single,
            )
        return self.temperature

    @property
    def compound_spec(self):
        """The manifest's ``compound`` section for this model (None without a fitted compound head)."""
        head = self.compound
        return head.spec() if head is not None and head.threshold is not None else None

    @property
    def compound_intents(self) -> list[str]:
        return list(self.compound.intents) if self.compound is not None else []

    def clause_probabilities(self, texts: Sequence[str]) -> list[list[dict[str, float]]]:
        """Per message, each of its clauses (router.clauses) as label -> probability, read as the router
        reads them: alone (calibrated) or, with a clause reader, in context."""
        texts = list(texts)
        return self._read_clauses(texts, [split_clauses(t) for t in texts])

    def _read_clauses(
        self, texts: Sequence[str], split: Sequence[Sequence[str]]
    ) -> list[list[dict[str, float]]]:
        head = self.compound
        if head is None or not head.reader_layers:
            return classify_clauses(split, self.labels, self.predict_proba)
        vectors = self.clause_vectors(texts, split, head.reader_layers)
        return read_in_context(vectors, head.reader_coef, head.reader_intercept, self.labels)

    def clause_vectors(
        self,
        texts: Sequence[str],
        split: Sequence[Sequence[str]],
        layers: Sequence[int],
        batch_size: int = 64,
    ) -> list[np.ndarray]:
        """Per message, its clauses' vectors (router.compound.clause_vectors) from the token states of encoder
        ``layers`` in one run over the whole message, as the exported graph's ``clause_states`` gives them."""
        import torch

        body = self.setfit.model_body
        transformer, tokenizer = body[0].auto_model, body.tokenizer
        out = [np.zeros((0, 1), np.float32) for _ in texts]
        todo = [i for i, clauses in enumerate(split) if clauses]
        was_training = transformer.training
        transformer.eval()
        try:
            with torch.inference_mode():
                for s in range(0, len(todo), batch_size):
                    rows = todo[s : s + batch_size]
                    enc = tokenizer(
                        [texts[i] for i in rows],
                        padding=True,
                        truncation=True,
                        max_length=body.max_seq_length,
                        return_offsets_mapping=True,
                        return_tensors="pt",
                    )
                    offsets = enc.pop("offset_mapping").numpy()
                    hidden = transformer(**enc, output_hidden_states=True).hidden_states
                    states = torch.cat([hidden[k] for k in layers], dim=-1).float().numpy()
                    lengths = enc["attention_mask"].sum(dim=1).tolist()
                    for r, i in enumerate(rows):
                        n = int(lengths[r])
                        out[i] = clause_vectors(texts[i], split[i], offsets[r, :n], states[r, :n])
        finally:
            transformer.train(was_training)
        return out

    def predict_compound(
        self, texts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, list[list[str]], list[list[dict]]]:
        """(calibrated probabilities, in-scope distances or None, one-vs-rest intent scores, intents by
        router.compound.resolve_intents, clauses), as the exported graph and the router give them."""
        texts = list(texts)
        if not texts:
            k = len(self.compound_intents)
            return (
                np.zeros((0, len(self.labels))),
                (None if self.scope is None else np.zeros(0)),
                np.zeros((0, k)),
                [],
                [],
            )
        emb = self.encode(texts)
        probs = softmax(self._head_logits(emb), self.temperature)
        dist = self.scope.distance(emb) if self.scope is not None else None
        scores = self.compound.scores(emb) if self.compound is not None else None
        primaries = [self.labels[i] for i in probs.argmax(axis=1)]
        intents, clauses = resolve_batch(
            texts, primaries, self.compound_spec, scores, lambda split: self._read_clauses(texts, split)
        )
        return probs, dist, scores if scores is not None else np.zeros((len(texts), 0)), intents, clauses

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
        emb = self.setfit.model_body.encode(
            list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
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


def teacher_body(path: str | Path, workdir: Path, report: Reporter = print) -> tuple[Path, dict | None]:
    """The teacher's body as a folder ``_load_body`` reads: its SetFit checkpoint (then None), or, for an
    exported model that ships without one, the body recovered from its graph into ``workdir``, with
    training.recover's note on it."""
    try:
        return teacher_checkpoint(path), None
    except ModelError:
        if not (Path(path) / MANIFEST_NAME).is_file():
            raise
    import torch

    from training.recover import recover_body

    out = workdir / "recovered-body"
    with torch.random.fork_rng(devices=[]):  # the student's training draws what it would from a checkpoint
        note = recover_body(path, out, report=report)
    return out, note


def teacher_checkpoint(path: str | Path) -> Path:
    """The SetFit checkpoint of a teacher given as a build directory (``<dir>/checkpoint``) or as the
    checkpoint itself."""
    path = Path(path)
    named = checkpoint_of(path, load_manifest(path)) if (path / MANIFEST_NAME).is_file() else None
    for candidate in (named, path / CHECKPOINT_DIR, path):
        if candidate is not None and is_setfit_checkpoint(candidate):
            return candidate
    raise ModelError(
        f"teacher {path}: no SetFit checkpoint there or in {path / CHECKPOINT_DIR}, and no exported model "
        f"({MANIFEST_NAME}) whose graph could give the body: name a build directory or an exported model"
    )


def _load_body(body, checkpoint: Path) -> None:
    """Copy a fine-tuned body's weights into ``body``; the two must share the base model's architecture."""
    from sentence_transformers import SentenceTransformer

    source = SentenceTransformer(str(checkpoint), device="cpu")
    try:
        body.load_state_dict(source.state_dict())
    except RuntimeError as e:
        raise ModelError(f"teacher {checkpoint} does not fit base_model's architecture: {e}") from e


def check_reader_layers(layers: Sequence[int], n: int) -> None:
    """The clause reader's layers exist in a body of ``n`` encoder layers (0 = the embeddings)."""
    bad = [k for k in layers if not 0 <= k <= n] or ([] if len(set(layers)) == len(layers) else list(layers))
    if bad or not layers:
        raise ValueError(
            f"clause_context_layers must be distinct layers in 0..{n} of this body, got {list(layers)}"
        )


def _label_sets(labels: Sequence[str], secondary: Sequence[str | None]) -> list[list[str]]:
    """Intents of each row for the one-vs-rest head: [] for out of scope, one or two intents otherwise."""
    return [
        [] if l == OUT_OF_SCOPE else [l] + ([s] if s else []) for l, s in zip(labels, secondary, strict=True)
    ]


def _contrastive_rows(ds, oos_rows: int | None, seed: int):
    """The rows of the contrastive phase: all of them, or at most ``oos_rows`` OUT_OF_SCOPE rows (a
    seeded sample), so chit-chat does not take the pair budget from the intents. The head sees all."""
    oos = [i for i, l in enumerate(ds["label"]) if l == OUT_OF_SCOPE]
    if oos_rows is None or len(oos) <= oos_rows:
        return ds
    drop = set(random.Random(seed).sample(oos, len(oos) - oos_rows))
    return ds.select([i for i in range(len(ds)) if i not in drop])


def _progress_callback(progress, task, report: Reporter, batch_size: int):
    """Rich bar on a terminal; a line every 10% elsewhere (CI logs), with the pair rate."""
    from transformers import TrainerCallback

    interactive = progress.console.is_terminal and not progress.disable

    class RichProgress(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0, self.every = time.perf_counter(), max(1, state.max_steps // 10)
            progress.update(task, total=state.max_steps)

        def on_step_end(self, args, state, control, **kw):
            progress.update(task, completed=state.global_step)
            if not interactive and (
                state.global_step % self.every == 0 or state.global_step == state.max_steps
            ):
                rate = state.global_step * batch_size / (time.perf_counter() - self.t0)
                report(f"contrastive step {state.global_step}/{state.max_steps} ({rate:.0f} pairs/s)")

    return RichProgress()


def is_setfit_checkpoint(path: Path) -> bool:
    return path.is_dir() and ((path / "config_setfit.json").is_file() or (path / "model_head.pkl").is_file())


def checkpoint_of(model_dir: Path, manifest: Manifest) -> Path:
    return model_dir / str(manifest.training.get("checkpoint", CHECKPOINT_DIR))


def load_predictor(model: str | Path, backend: str = "auto", variant: str | None = None):
    """Open ``model`` for evaluation. ``auto``: a directory whose manifest has an ``export`` section runs
    through ONNX Runtime; one with a manifest but no export, or a bare SetFit checkpoint, through
    PyTorch. ``torch`` uses ``<model>/checkpoint`` (or the bare checkpoint given) with the manifest's
    temperature (a bare ``<model>/checkpoint`` uses its parent model's)."""
    from eval.predictors import OnnxPredictor

    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose from {', '.join(BACKENDS)}")
    path = Path(model)
    if not path.is_dir():
        raise ModelError(f"model directory not found: {path}")
    manifest = load_manifest(path) if (path / MANIFEST_NAME).is_file() else None
    if backend == "auto":
        if manifest is not None and manifest.export is not None:
            backend = "onnx"
        elif manifest is not None or is_setfit_checkpoint(path):
            backend = "torch"
        else:
            raise ModelError(
                f"{path}: neither a model directory (no {MANIFEST_NAME}) nor a SetFit checkpoint"
            )
    if backend == "onnx":
        if manifest is None:
            raise ModelError(f"{path}: the ONNX backend needs a model directory with {MANIFEST_NAME}")
        return OnnxPredictor(path, variant=variant, manifest=manifest)
    if variant is not None:
        raise ValueError("--variant names an ONNX graph; it does not apply to the torch backend")
    if manifest is not None:
        ckpt = checkpoint_of(path, manifest)
        if not is_setfit_checkpoint(ckpt):
            raise ModelError(
                f"{ckpt}: no SetFit checkpoint (exported model directories ship without one; "
                "evaluate the training output, or use the onnx backend)"
            )
        return IntentModel.load(ckpt, manifest=manifest)
    if not is_setfit_checkpoint(path):
        raise ModelError(f"{path}: not a SetFit checkpoint (no config_setfit.json or model_head.pkl)")
    parent_manifest = None
    if (path.parent / MANIFEST_NAME).is_file():  # <model>/checkpoint given directly: its model's temperature
        m = load_manifest(path.parent)
        if checkpoint_of(path.parent, m).name == path.name:
            parent_manifest = m
    return IntentModel.load(path, manifest=parent_manifest)
