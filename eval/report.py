"""Run an evaluation and write its report: eval.json (schema eval/schema/eval_report.schema.json),
report.md and the PNG plots.

    report = run_evaluation("models/intent-minilm", "data/test.jsonl", oos="data/oos.jsonl")
    write_report(report, "reports/eval")
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from eval.data import load_labeled, load_unlabeled
from eval.latency import DEFAULT_SAMPLES, measure_latency
from eval.metrics import (
    DEFAULT_BINS,
    DEFAULT_TAUS,
    at_threshold,
    calibration_metrics,
    classification_metrics,
    misclassified,
    oos_recall,
    threshold_sweep,
)
from eval.predictors import Predictor, load_predictor
from router.config import RouterConfig, validate_threshold
from router.guardrail import low_signal_reason
from router.manifest import package_versions

SCHEMA_VERSION = 1
REPORT_KIND = "intent-router-eval"
SCHEMA_PATH = Path(__file__).resolve().parent / "schema" / "eval_report.schema.json"
REPORT_FILES = {"json": "eval.json", "markdown": "report.md"}
PREDICT_BATCH = 64
MAX_OOS_ACCEPTED = 50
VERSIONED_PACKAGES = (
    "onnxruntime",
    "tokenizers",
    "numpy",
    "scikit-learn",
    "torch",
    "setfit",
    "sentence-transformers",
    "datasets",
)


def default_threshold() -> float:
    """The router's threshold from its default config (router/config/default.yaml)."""
    return RouterConfig.load().threshold


def predict_in_batches(
    predictor: Predictor, texts: Sequence[str], batch_size: int = PREDICT_BATCH
) -> np.ndarray:
    parts = [
        predictor.predict_proba(list(texts[i : i + batch_size])) for i in range(0, len(texts), batch_size)
    ]
    return np.concatenate(parts, axis=0) if parts else np.zeros((0, len(predictor.labels)))


def run_evaluation(
    model: str | Path | None,
    data: str | Path,
    *,
    oos: str | Path | None = None,
    threshold: float | None = None,
    variant: str | None = None,
    backend: str = "auto",
    text_column: str = "text",
    label_column: str = "label",
    split: str | None = None,
    skip_invalid: bool = False,
    verifier=None,
    verifier_max: int | None = None,
    verifier_name: str | None = None,
    max_latency_samples: int = DEFAULT_SAMPLES,
    n_bins: int = DEFAULT_BINS,
    taus: Sequence[float] = DEFAULT_TAUS,
    predictor: Predictor | None = None,
) -> dict:
    """Evaluate a model on labeled ``data`` (and unlabeled out-of-scope ``oos``); return the report dict.

    ``model`` is an exported model directory or a SetFit checkpoint (see eval.predictors), or None when
    an already opened ``predictor`` is given. ``threshold`` defaults to the router's (0.75).
    ``verifier`` (a router.verifier.Verifier) adds the verifier lift on below-threshold messages.
    ``max_latency_samples=0`` skips the latency measurement.
    """
    tau = validate_threshold(threshold if threshold is not None else default_threshold())
    if predictor is None:
        if model is None:
            raise ValueError("give a model path or a predictor")
        predictor = load_predictor(model, backend=backend, variant=variant)
    labels = list(predictor.labels)
    ds = load_labeled(
        data,
        labels=labels,
        text_column=text_column,
        label_column=label_column,
        split=split,
        skip_invalid=skip_invalid,
    )
    index = {l: i for i, l in enumerate(labels)}
    y = np.array([index[l] for l in ds.labels], dtype=int)
    probs = predict_in_batches(predictor, ds.texts)

    oos_section, oos_probs = None, None
    if oos is not None:
        ods = load_unlabeled(oos, text_column=text_column, split=split, skip_invalid=skip_invalid)
        oos_probs = predict_in_batches(predictor, ods.texts)
        low = [low_signal_reason(t) is not None for t in ods.texts]
        oos_section = {
            **_source(ods),
            **oos_recall(oos_probs, tau, low_signal=low),
            "accepted_examples": _oos_accepted(ods, oos_probs, labels, tau, low),
        }

    sweep = threshold_sweep(probs, y, list(taus) + [tau], oos_probs=oos_probs)
    at_tau = at_threshold(probs, y, tau)
    report = {
        "schema_version": SCHEMA_VERSION,
        "kind": REPORT_KIND,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": _model_section(model, predictor),
        "data": {
            **_source(ds),
            "text_column": text_column,
            "label_column": label_column,
            "label_counts": {l: int((y == i).sum()) for i, l in enumerate(labels)},
        },
        "threshold": round(tau, 4),
        "classification": classification_metrics(y, probs.argmax(axis=1), labels),
        "calibration": calibration_metrics(probs, y, n_bins),
        "thresholds": {"tau": round(tau, 4), "at_tau": at_tau, "sweep": sweep},
        "oos": oos_section,
        "latency": measure_latency(predictor, ds.texts, max_latency_samples)
        if max_latency_samples > 0
        else None,
        "misclassified": misclassified(
            ds.texts, y, probs, labels, tau, rows=ds.rows, where=[ds.where(i) for i in range(len(ds))]
        ),
        "verifier": None,
        "environment": _environment(),
    }
    if verifier is not None:
        from eval.verifier_lift import verifier_lift

        report["verifier"] = verifier_lift(
            verifier, ds.texts, y, probs, labels, tau, max_messages=verifier_max, describe=verifier_name
        )
    return report


def _source(ds) -> dict:
    return {
        "source": ds.source,
        "format": ds.format,
        "split": ds.split,
        "sha256": ds.sha256,
        "n": len(ds),
        "skipped": [{"row": p["row"], "line": p["line"], "reason": p["reason"]} for p in ds.skipped],
    }


def _oos_accepted(ods, probs: np.ndarray, labels: list[str], tau: float, low: list[bool]) -> list[dict]:
    """Out-of-scope messages the router would accept as an intent (confidence >= tau, not stopped by the guardrail)."""
    conf, pred = probs.max(axis=1), probs.argmax(axis=1)
    hits = [i for i in range(len(conf)) if conf[i] >= tau and not low[i]]
    hits.sort(key=lambda i: -conf[i])
    return [
        {
            "row": ods.rows[i],
            "text": ods.texts[i],
            "predicted": labels[pred[i]],
            "confidence": round(float(conf[i]), 6),
        }
        for i in hits[:MAX_OOS_ACCEPTED]
    ]


def _model_section(model, predictor: Predictor) -> dict:
    m = predictor.manifest
    return {
        "path": str(model) if model is not None else None,
        "backend": predictor.backend,
        "variant": predictor.variant,
        "model_id": predictor.model_id,
        "name": m.name if m is not None else None,
        "created_at": m.created_at if m is not None else None,
        "labels": list(predictor.labels),
        "temperature": getattr(predictor, "temperature", None),
    }


def _environment() -> dict:
    versions = package_versions(VERSIONED_PACKAGES)
    return {
        "python": versions.pop("python"),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "threads": os.environ.get("INTENT_ROUTER_THREADS"),
        "packages": versions,
    }


# ------------------------------------------------------------------------------------- writing
def write_report(report: dict, out_dir: str | Path, plots: bool = True) -> dict[str, Path]:
    """Write eval.json, report.md and (with ``plots``) the three PNGs; return their paths by kind."""
    from eval.markdown import render_markdown
    from eval.plots import write_plots

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    paths["json"] = out_dir / REPORT_FILES["json"]
    paths["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    if plots:
        paths.update(write_plots(report, out_dir))
    paths["markdown"] = out_dir / REPORT_FILES["markdown"]
    paths["markdown"].write_text(render_markdown(report, plots=plots), encoding="utf-8")
    return paths


class ReportError(ValueError):
    """A report file cannot be read or has an unsupported schema version."""


def load_report(path: str | Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise ReportError(f"report not found: {path}")
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is not valid JSON: {e}") from e
    if not isinstance(report, dict) or report.get("kind") != REPORT_KIND:
        raise ReportError(
            f"{path} is not an intent-router evaluation report (kind {report.get('kind') if isinstance(report, dict) else None!r})"
        )
    if report.get("schema_version") != SCHEMA_VERSION:
        raise ReportError(
            f"{path}: report schema_version {report.get('schema_version')!r} is not supported (expected {SCHEMA_VERSION})"
        )
    return report


def load_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
