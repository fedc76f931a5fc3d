"""Train the intent model on the corpus: fit (SetFit), calibrate (temperature on dev), score dev and
test with eval's evaluator, and write ``<out>/checkpoint/`` and ``<out>/manifest.json``."""

from __future__ import annotations

import os
import platform
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from eval.metrics.calibration import softmax, summary
from eval.metrics.evaluator import split_metrics
from eval.readers.loader import load_labeled
from router.intents import check_labels
from router.manifest import (
    Calibration,
    Compound,
    InScope,
    Manifest,
    package_versions,
    sha256_file,
)
from training.distil.loop import native_bf16
from training.distil.teacher_targets import TeacherTargets
from training.fit.checkpoints import CHECKPOINT_DIR, teacher_description
from training.fit.intent_model import IntentModel
from training.train_config import TrainConfig

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
# the config's fields the manifest records elsewhere (its name and languages, the data files)
NOT_HYPERPARAMETERS = (
    "name",
    "languages",
    "train_file",
    "more_train_files",
    "heads_only_file",
    "label_files",
    "dev_file",
    "test_file",
    "compound_train_file",
    "more_compound_train_files",
    "compound_label_files",
    "compound_dev_file",
    "compound_test_file",
)


def _data_digest(paths: Sequence[Path]) -> dict[str, str]:
    return {str(p): sha256_file(p) for p in paths}


def train(
    config: TrainConfig, out_dir: str | Path, report: Reporter = print, show_progress: bool = True
) -> Manifest:
    """Train, calibrate and evaluate; write the checkpoint and manifest to ``out_dir``."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    out_dir = Path(out_dir)
    t_start = time.perf_counter()
    data = _read_corpus(config, report)
    n_train = len(data.train_rows)
    model = IntentModel(config).fit(
        data.fit_rows.texts,
        data.fit_rows.labels,
        report,
        show_progress,
        secondary=data.fit_rows.secondary,
        body=[i < n_train for i in range(len(data.fit_rows))],
        head_repeats=data.repeats,
        distilled=data.distilled,
    )
    calib, metrics, calib_seconds = _calibrate(model, data, config, report)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save(out_dir / CHECKPOINT_DIR)
    manifest = _manifest(config, model, data, calib, metrics, calib_seconds, t_start)
    manifest.save(out_dir)
    return manifest


@dataclass
class _Corpus:
    """The rows a training run reads: ``fit_rows`` are the train rows, then the heads-only rows (together
    ``head_rows``; ``label_files``' rows last among them), then the compound train rows; ``repeats`` says
    how often each counts in the head, ``distilled`` whether a distillation learns its text."""

    train_rows: Any
    heads_only: Any
    dev_rows: Any
    test_rows: Any
    compound: dict
    head_rows: Any
    fit_rows: Any
    repeats: list[int]
    distilled: list[bool]


def _read_corpus(config: TrainConfig, report: Reporter) -> _Corpus:
    # the model's labels are the train file's: its intents, and the reserved labels it uses; an intent
    # the router config defines by examples (router.examples) becomes a class, its examples its rows
    train_rows = _with_example_intents(load_labeled(config.train_file), config.router_config, report)
    labels_in_data = sorted(set(train_rows.labels))
    check_labels(labels_in_data, str(config.train_file))
    unknown = [i for i in config.intents or [] if i not in labels_in_data]
    if unknown:
        raise ValueError(f"intents {unknown} of the training config are not labels of {config.train_file}")
    for path in config.more_train_files:
        train_rows = _joined(train_rows, load_labeled(path, labels=labels_in_data))
    # label_files' rows, last among the heads-only ones: no distillation learns them
    heads_only, label_only = _read_more(None, config.heads_only_files, config.label_files, labels_in_data)
    dev_rows = load_labeled(config.dev_file, labels=labels_in_data)
    test_rows = load_labeled(config.test_file, labels=labels_in_data) if config.test_file else None

    compound = {
        split: load_labeled(path, labels=labels_in_data) if path else None
        for split, path in (
            ("train", config.compound_train_file),
            ("dev", config.compound_dev_file),
            ("test", config.compound_test_file),
        )
    }
    for field in ("more_compound_train_files", "compound_label_files"):
        if getattr(config, field) and compound["train"] is None:
            raise ValueError(f"{field} needs compound_train_file")
    # compound_label_files' rows, last of all: no distillation learns them
    compound["train"], compound_only = _read_more(
        compound["train"], config.more_compound_train_files, config.compound_label_files, labels_in_data
    )
    if (compound["train"] is None) != (compound["dev"] is None):
        raise ValueError(
            "the compound head needs both compound_train_file and compound_dev_file (or neither)"
        )
    head_rows = _joined(train_rows, heads_only)
    fit_rows = _joined(head_rows, compound["train"])
    # each heads-only row counts heads_only_weight times in the softmax head (and in its prior, below)
    repeats = [
        config.heads_only_weight if len(train_rows) <= i < len(head_rows) else 1 for i in range(len(fit_rows))
    ]
    distilled = [
        not (len(head_rows) - label_only <= i < len(head_rows) or i >= len(fit_rows) - compound_only)
        for i in range(len(fit_rows))
    ]
    return _Corpus(
        train_rows, heads_only, dev_rows, test_rows, compound, head_rows, fit_rows, repeats, distilled
    )


def _read_more(rows, distilled_files, undistilled_files, labels):
    """``rows`` (or None) joined with the rows of ``distilled_files`` and then ``undistilled_files``; and
    how many rows the undistilled files gave, which come last."""
    undistilled = 0
    for path in [*distilled_files, *undistilled_files]:
        more = load_labeled(path, labels=labels)
        rows = _joined(rows, more) if rows is not None else more
        undistilled += len(more) if path in undistilled_files else 0
    return rows, undistilled


def _calibrate(model: IntentModel, data: _Corpus, config: TrainConfig, report: Reporter):
    """The temperature fitted on dev (and the compound dev rows), the dev and test metrics before and
    after it, and the seconds that took."""
    t0 = time.perf_counter()
    dev_rows, test_rows, compound = data.dev_rows, data.test_rows, data.compound
    labels = model.labels
    cal_rows = _joined(dev_rows, compound["dev"])
    temperature = model.calibrate(cal_rows.texts, cal_rows.labels, cal_rows.secondary)
    # fitted_on: "prior" when dev could not place the temperature (training.fit.calibrate)
    calib = Calibration(
        temperature=temperature, fitted_on="dev" if model.temperature_note is None else "prior"
    )
    metrics: dict = {}
    for split, rows in (("dev", dev_rows), ("test", test_rows)):
        if not rows:
            continue
        logits, y = model.logits(rows.texts), model.label_ids(rows.labels)
        calib.before[split] = summary(softmax(logits, 1.0), y)
        calib.after[split] = summary(softmax(logits, temperature), y)
        metrics[split] = split_metrics(softmax(logits, temperature), y, labels)
    calib_seconds = time.perf_counter() - t0
    if model.temperature_note is None:
        report(f"temperature {temperature:.3f} fitted on dev ({len(dev_rows)} rows)")
    else:
        report(f"temperature {temperature:.3f}: {model.temperature_note}")
    if model.distance_threshold is not None:
        report(
            f"in-scope distance threshold {model.distance_threshold:.1f} (keeps {config.in_scope_keep:.1%} of dev in scope)"
        )
    if model.compound_spec is not None:
        report(
            f"compound threshold {model.compound_spec.threshold:.2f} (calls at most "
            f"{config.compound_max_single:.1%} of dev single-intent messages compound)"
        )

    return calib, metrics, calib_seconds


def _manifest(config, model, data: _Corpus, calib, metrics, calib_seconds: float, t_start: float) -> Manifest:
    """The manifest of a trained model: what it was trained on and with, its calibration and heads."""
    train_rows, heads_only, dev_rows, test_rows = (
        data.train_rows,
        data.heads_only,
        data.dev_rows,
        data.test_rows,
    )
    compound, head_rows, repeats, labels = data.compound, data.head_rows, data.repeats, model.labels
    data_files = [config.train_file, *config.more_train_files]
    data_files += [*config.heads_only_files, *config.label_files, config.dev_file]
    data_files += [config.test_file] if config.test_file else []
    data_files += [Path(r.source) for r in compound.values() if r is not None]
    data_files += [*config.more_compound_train_files, *config.compound_label_files]
    manifest = Manifest(
        name=config.name,
        created_at=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        labels=labels,
        base_model=config.base_model if not Path(config.base_model).is_dir() else str(config.base_model),
        languages=list(config.languages),
        max_seq_length=config.max_seq_length,
        training={
            "hyperparameters": config.model_dump(mode="json", exclude=set(NOT_HYPERPARAMETERS)),
            "data": {
                "files": _data_digest(data_files),
                "rows": {
                    "train": len(train_rows),
                    **({"heads_only": len(heads_only)} if heads_only else {}),
                    "dev": len(dev_rows),
                    "test": len(test_rows) if test_rows else 0,
                    **{f"compound_{k}": len(r) for k, r in compound.items() if r is not None},
                },
                "label_counts": _head_counts(head_rows.labels, repeats),
            },
            "versions": package_versions(VERSIONED_PACKAGES),
            "machine": {
                "cpus": os.cpu_count(),
                "platform": platform.platform(),
                "native_bf16": native_bf16(),
            },
            "seconds": {
                "contrastive": round(model.fit_seconds["contrastive"], 2),
                "distil": round(model.fit_seconds["distil"], 2),
                "labels": round(model.fit_seconds["labels"], 2),
                "head": round(model.fit_seconds["head"], 2),
                "calibration_and_eval": round(calib_seconds, 2),
                "total": round(time.perf_counter() - t_start, 2),
            },
            "checkpoint": CHECKPOINT_DIR,
            **({"teacher": teacher} if (teacher := _teacher_of(config, model)) else {}),
        },
        calibration=calib,
        metrics=metrics,
        in_scope=_in_scope_section(model),
        compound=_compound_section(model),
    )
    return manifest


def _teacher_of(config: TrainConfig, model: IntentModel) -> dict | None:
    """The manifest's note of the teacher a student learned from: the teacher itself, or the stored
    targets it was distilled from (with the teacher they came from) and whether the build wrote them."""
    if config.teacher is None and config.teacher_targets is None:
        return None
    out = teacher_description(config.teacher, model.teacher_recovery) if config.teacher is not None else {}
    if config.teacher_targets is not None:
        path = Path(config.teacher_targets)
        out["targets"] = {
            "path": str(path),
            "sha256": sha256_file(path),
            "written": config.teacher is not None,
        }
        if config.teacher is None:
            out.update(TeacherTargets(path).teacher)
    return out


def _in_scope_section(model: IntentModel) -> InScope | None:
    scope = model.scope
    if scope is None or scope.threshold is None:
        return None
    return InScope(
        classes=scope.classes, shrinkage=scope.shrinkage, threshold=scope.threshold, keep=scope.keep
    )


def _compound_section(model: IntentModel) -> Compound | None:
    return model.compound_spec


def _with_example_intents(rows, router_config: Path | None, report: Reporter):
    """``rows`` plus the examples of each intent the router config defines by examples that the rows
    do not label, as rows of that intent."""
    if router_config is None:
        return rows
    from eval.readers.loader import LabeledData
    from router.config import RouterConfig

    defined = RouterConfig.load(router_config).example_intents(sorted(set(rows.labels)))
    if not defined:
        return rows
    extra = [(text, name) for name, texts in defined.items() for text in texts]
    report(f"intents defined by examples in {router_config}, trained as classes: " + ", ".join(defined))
    added = LabeledData(
        texts=[t for t, _ in extra], labels=[n for _, n in extra], source=str(router_config), format="yaml"
    )
    added.rows = list(range(1, len(extra) + 1))
    return _joined(rows, added)


def _head_counts(labels: Sequence[str], repeats: Sequence[int]) -> dict[str, int]:
    """Rows per label the softmax head learned its prior from, each row counted as often as it was repeated
    (``labels`` are the head's rows, ``repeats`` the fit's, whose first rows they are)."""
    counts: Counter[str] = Counter()
    for label, r in zip(labels, repeats[: len(labels)], strict=True):
        counts[label] += r
    return dict(sorted(counts.items()))


def _joined(rows, extra):
    """Single-intent rows plus compound rows (and twins) as one LabeledData-like set."""
    if extra is None:
        return rows
    from dataclasses import replace

    second = (rows.secondary or [None] * len(rows)) + (extra.secondary or [None] * len(extra))
    return replace(
        rows,
        texts=rows.texts + extra.texts,
        labels=rows.labels + extra.labels,
        secondary=second,
        rows=rows.rows + extra.rows,
        lines=None,
    )


def summary_rows(manifest: Manifest) -> tuple[str, list[str], list[list[str]]]:
    """(title, header, rows) of a trained model's metrics per split, before and after calibration."""
    cal = manifest.calibration
    header = ["split", "accuracy", "macro_f1", "ece before", "ece after", "nll before", "nll after"]
    rows = [
        [
            split,
            f"{m['accuracy']:.4f}",
            f"{m['macro_f1']:.4f}",
            f"{cal.before[split]['ece']:.4f}",
            f"{cal.after[split]['ece']:.4f}",
            f"{cal.before[split]['nll']:.4f}",
            f"{cal.after[split]['nll']:.4f}",
        ]
        for split, m in manifest.metrics.items()
    ]
    return f"{manifest.name}: temperature {cal.temperature:.3f}", header, rows
