"""SetFit training of the intent model: contrastive body fine-tuning, logistic head, temperature.

Writes ``<out>/checkpoint/`` (the SetFit model) and ``<out>/manifest.json``.
"""

from __future__ import annotations

import os
import platform
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from eval.calibration import softmax, summary
from router.manifest import Calibration, Manifest, package_versions, sha256_file
from training.config import TrainConfig, resolve_base_model
from training.corpus import Example, load_examples

CHECKPOINT_DIR = "checkpoint"
VERSIONED_PACKAGES = (
    "setfit",
    "sentence-transformers",
    "transformers",
    "torch",
    "scikit-learn",
    "onnxruntime",
    "onnx",
    "tokenizers",
    "numpy",
)

Reporter = Callable[[str], None]


def set_seed(seed: int) -> None:
    import torch
    from transformers import set_seed as hf_set_seed

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    hf_set_seed(seed)


def head_logits(model, embeddings: np.ndarray) -> np.ndarray:
    """Raw class scores of the fitted logistic head, in ``model_head.classes_`` order."""
    scores = np.asarray(model.model_head.decision_function(embeddings), dtype=np.float64)
    if scores.ndim == 1:  # binary head: predict_proba is sigmoid(s) == softmax([0, s])
        scores = np.stack([np.zeros_like(scores), scores], axis=1)
    return scores


def head_labels(model) -> list[str]:
    """Label order of the head's outputs. SetFit's predict_proba follows ``classes_`` (sorted), not
    ``model.labels``, so this is the one order everything downstream must use."""
    return [str(c) for c in model.model_head.classes_]


def encode(model, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
    emb = model.model_body.encode(
        list(texts), batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False
    )
    return np.asarray(emb, dtype=np.float32)


def calibrated_probs(model, texts: Sequence[str], temperature: float) -> np.ndarray:
    return softmax(head_logits(model, encode(model, texts)), temperature)


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


def load_setfit(path: str | Path):
    """Load a SetFit checkpoint (local folder) for evaluation or export."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from setfit import SetFitModel

    quiet_libraries()

    return SetFitModel.from_pretrained(str(path))


def _label_ids(examples: Sequence[Example], labels: list[str]) -> np.ndarray:
    index = {l: i for i, l in enumerate(labels)}
    return np.array([index[e.label] for e in examples])


def _data_digest(paths: Sequence[Path]) -> dict[str, str]:
    return {str(p): sha256_file(p) for p in paths}


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


def fit_setfit(
    texts: Sequence[str],
    labels: Sequence[str],
    config: TrainConfig,
    report: Reporter = print,
    show_progress: bool = True,
) -> tuple:
    """Fit a SetFit model on in-memory rows with ``config``'s hyperparameters (its file fields are not read):
    contrastive body fine-tuning, then the logistic head. Returns ``(model, {"contrastive": s, "head": s})``.

    Used by ``train`` (the five-intent corpus) and ``training.benchmarks`` (public benchmarks)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    texts, labels = list(texts), list(labels)
    if len(texts) != len(labels):
        raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
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
    model = SetFitModel.from_pretrained(
        base, labels=labels_in_data, head_params={"C": config.head_c, "max_iter": config.head_max_iter}
    )
    model.model_body.max_seq_length = config.max_seq_length

    ds = Dataset.from_dict({"text": texts, "label": labels})
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
            disable=not show_progress,
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
            t0 = time.perf_counter()
            trainer.train_embeddings(*trainer.dataset_to_parameters(ds), args=args)
            body_seconds = time.perf_counter() - t0
        report(f"contrastive phase: {body_seconds:.1f}s")
        t0 = time.perf_counter()
        trainer.train_classifier(*trainer.dataset_to_parameters(ds), args=args)
        head_seconds = time.perf_counter() - t0
    report(f"head fitted: {head_seconds:.1f}s")
    return model, {"contrastive": body_seconds, "head": head_seconds}


def train(
    config: TrainConfig, out_dir: str | Path, report: Reporter = print, show_progress: bool = True
) -> Manifest:
    """Train, calibrate and evaluate; write the checkpoint and manifest to ``out_dir``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = Path(out_dir)
    t_start = time.perf_counter()

    train_rows = load_examples(config.train_file)
    dev_rows = load_examples(config.dev_file)
    test_rows = load_examples(config.test_file) if config.test_file else []
    labels_in_data = sorted({e.label for e in train_rows})
    if len(labels_in_data) < 2:
        raise ValueError(f"{config.train_file}: need at least two labels to train, found {labels_in_data}")
    for name, rows in (("dev", dev_rows), ("test", test_rows)):
        unseen = sorted({e.label for e in rows} - set(labels_in_data))
        if unseen:
            raise ValueError(f"{name} file has labels the training data lacks: {unseen}")

    model, seconds = fit_setfit(
        [e.text for e in train_rows], [e.label for e in train_rows], config, report, show_progress
    )
    body_seconds, head_seconds = seconds["contrastive"], seconds["head"]

    labels = head_labels(model)
    t0 = time.perf_counter()
    dev_logits = head_logits(model, encode(model, [e.text for e in dev_rows]))
    y_dev = _label_ids(dev_rows, labels)
    from training.calibrate import fit_temperature

    temperature = fit_temperature(dev_logits, y_dev)
    calib = Calibration(temperature=temperature)
    calib.before["dev"] = summary(softmax(dev_logits, 1.0), y_dev)
    calib.after["dev"] = summary(softmax(dev_logits, temperature), y_dev)
    metrics: dict = {"dev": _classification(softmax(dev_logits, temperature), y_dev, labels)}
    if test_rows:
        test_logits = head_logits(model, encode(model, [e.text for e in test_rows]))
        y_test = _label_ids(test_rows, labels)
        calib.before["test"] = summary(softmax(test_logits, 1.0), y_test)
        calib.after["test"] = summary(softmax(test_logits, temperature), y_test)
        metrics["test"] = _classification(softmax(test_logits, temperature), y_test, labels)
    calib_seconds = time.perf_counter() - t0
    report(f"temperature {temperature:.3f} fitted on dev ({len(dev_rows)} rows)")

    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir / CHECKPOINT_DIR))
    data_files = [config.train_file, config.dev_file] + ([config.test_file] if config.test_file else [])
    manifest = Manifest(
        name=config.name,
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        labels=labels,
        base_model=config.base_model if not Path(config.base_model).is_dir() else str(config.base_model),
        max_seq_length=config.max_seq_length,
        training={
            "hyperparameters": config.model_dump(
                mode="json", exclude={"name", "train_file", "dev_file", "test_file"}
            ),
            "data": {
                "files": _data_digest(data_files),
                "rows": {"train": len(train_rows), "dev": len(dev_rows), "test": len(test_rows)},
            },
            "versions": package_versions(VERSIONED_PACKAGES),
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "seconds": {
                "contrastive": round(body_seconds, 2),
                "head": round(head_seconds, 2),
                "calibration_and_eval": round(calib_seconds, 2),
                "total": round(time.perf_counter() - t_start, 2),
            },
            "checkpoint": CHECKPOINT_DIR,
        },
        calibration=calib,
        metrics=metrics,
    )
    manifest.save(out_dir)
    return manifest


def _classification(probs: np.ndarray, y: np.ndarray, labels: list[str]) -> dict:
    """Calibration summary plus eval's classification metrics (accuracy, macro-F1, per class)."""
    from eval.metrics import classification_metrics

    out = summary(probs, y)
    cls = classification_metrics(y, probs.argmax(axis=1), labels)
    out.update(macro_f1=cls["macro_f1"], per_class=cls["per_class"])
    return out
