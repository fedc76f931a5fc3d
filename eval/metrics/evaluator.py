"""The one evaluator: classification metrics, calibration, threshold sweep, out-of-scope recall,
compound requests (eval.metrics.two_intent) and latency of any Predictor (an object with ``labels`` and
``predict_proba``).

``split_metrics`` scores probabilities already computed (training's manifest metrics);
``evaluate`` scores a predictor on loaded data (the metric sections of a report, and the benchmarks);
``run_evaluation`` loads the data files and adds the model, data and environment sections, giving the
report that eval.reports.report_files writes (schema eval/reports/schema/eval_report.schema.json).
"""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from eval.metrics.calibration import summary
from eval.metrics.classifier_metrics import (
    DEFAULT_BINS,
    calibration_metrics,
    classification_metrics,
    misclassified,
    rounded,
)
from eval.metrics.latency import DEFAULT_SAMPLES, measure_latency
from eval.metrics.out_of_scope import scope_metrics, scope_sweep
from eval.metrics.predictors import Predictor, load_onnx_predictor
from eval.metrics.routed import ACCEPTED, decide, decided_outcomes, routed_rows, router_for
from eval.metrics.thresholds import DEFAULT_TAUS, at_threshold, oos_recall, threshold_sweep
from eval.metrics.two_intent import (
    compound_metrics,
    has_compound_head,
    head_arguments,
    predict_compound_in_batches,
    predicted_intents,
    single_summary,
    skills_summary,
)
from eval.readers.loader import LabeledData, UnlabeledData, load_labeled, load_unlabeled
from router.config import RouterConfig, validate_threshold
from router.decision import Decision
from router.guardrail import low_signal_reason
from router.manifest import package_versions
from router.routing import Router

SCHEMA_VERSION = 1
REPORT_KIND = "intent-router-eval"
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


def split_metrics(probs: np.ndarray, y: np.ndarray, labels: Sequence[str]) -> dict:
    """Calibration summary (n, accuracy, ECE, NLL, Brier) plus macro-F1 and per-class metrics: a
    manifest's metrics for one split."""
    out = summary(probs, y)
    cls = classification_metrics(y, probs.argmax(axis=1), labels)
    out.update(macro_f1=cls["macro_f1"], per_class=cls["per_class"])
    return out


def _share(mask: np.ndarray) -> float | None:
    return rounded(float(np.mean(mask))) if len(mask) else None


@dataclass
class Evaluation:
    """Metric sections of a report, and the probabilities they were computed from."""

    sections: dict
    probs: np.ndarray
    y: np.ndarray
    oos_probs: np.ndarray | None = None


def evaluate(
    predictor: Predictor,
    data: LabeledData,
    *,
    oos: UnlabeledData | None = None,
    compound: LabeledData | None = None,
    tau: float,
    n_bins: int = DEFAULT_BINS,
    taus: Sequence[float] = DEFAULT_TAUS,
    max_latency_samples: int = DEFAULT_SAMPLES,
    config: RouterConfig | None = None,
    router: Router | None = None,
) -> Evaluation:
    """Score ``predictor`` on ``data`` (and out-of-scope ``oos``, compound requests ``compound``) at
    threshold ``tau``. ``config``: the router config whose skills and thresholds the routed figures use
    (default: the shipped one). The routed figures are counted from ``router``'s Decisions (eval.metrics.routed;
    default: a router over ``predictor`` with ``tau`` for every intent)."""
    cfg = config or RouterConfig.load()
    router = router or router_for(predictor, cfg, tau)
    labels = list(predictor.labels)
    index = {l: i for i, l in enumerate(labels)}
    y = np.array([index[l] for l in data.labels], dtype=int)
    if compound is not None:  # the compound rule's clause runs only when compound requests are scored
        probs, dist, intents, _ = predict_scored(predictor, data.texts)
    else:
        (probs, dist), intents = predict_in_batches(predictor, data.texts), None
    limit = getattr(predictor, "distance_threshold", None)
    decisions = decide(router, data.texts)
    decided = decided_outcomes(decisions, probs.argmax(axis=1))
    oos_section, oos_probs, low, oos_decided = None, None, None, None
    if oos is not None:
        oos_probs, _ = predict_in_batches(predictor, oos.texts)
        low = [low_signal_reason(t) is not None for t in oos.texts]
        oos_decisions = decide(router, oos.texts)
        oos_decided = decided_outcomes(oos_decisions, oos_probs.argmax(axis=1))
        oos_section = {
            **source_section(oos),
            **oos_recall(oos_probs, tau, low_signal=low, labels=labels),
            "router_recall": _share(~oos_decided["accepted"]),
            "accepted_examples": _oos_accepted(oos, oos_decisions),
        }
    all_taus = [*taus, tau]
    pred = predicted_intents(probs, labels, intents) if compound is not None else None
    sections = {
        "classification": classification_metrics(y, probs.argmax(axis=1), labels),
        "calibration": calibration_metrics(probs, y, n_bins),
        "thresholds": {
            "tau": round(tau, 4),
            "at_tau": at_threshold(probs, y, tau),
            "sweep": threshold_sweep(probs, y, all_taus, oos_probs=oos_probs, labels=labels),
        },
        "oos": oos_section,
        "scope": {
            **scope_metrics(y, labels, tau, limit, decided, oos_decided, oos_low_signal=low),
            "sweep": scope_sweep(probs, y, labels, all_taus, dist, limit),
        },
        "compound": None
        if compound is None
        else _compound_section(predictor, router, compound, tau, data, (decisions, pred), cfg),
        "latency": measure_latency(predictor, data.texts, max_latency_samples)
        if max_latency_samples > 0
        else None,
        "misclassified": misclassified(
            data.texts, y, probs, labels, tau, rows=data.rows, where=[data.where(i) for i in range(len(data))]
        ),
    }
    return Evaluation(sections, probs, y, oos_probs)


def predict_scored(
    predictor: Predictor, texts: Sequence[str]
) -> tuple[np.ndarray, np.ndarray | None, list[list[str]] | None, np.ndarray | None]:
    """(probabilities, distances or None, each message's intents and their confidence, both None without
    a compound head)."""
    if has_compound_head(predictor):
        return predict_compound_in_batches(predictor, texts, PREDICT_BATCH)
    return (*predict_in_batches(predictor, texts), None, None)


def _compound_section(
    predictor, router: Router, ds: LabeledData, tau: float, data: LabeledData, main: tuple, cfg: RouterConfig
) -> dict:
    """The compound file's rows scored apart; ``data_single``: the main data's single rows called
    compound, and the skills the router loads per message of the main data (``cfg``'s)."""
    probs, _, intents, _ = predict_scored(predictor, ds.texts)
    predicted = predicted_intents(probs, predictor.labels, intents)
    metrics = compound_metrics(
        ds.label_sets,
        tau,
        routed=routed_rows(decide(router, ds.texts), predicted),
        config=cfg,
        **head_arguments(predictor, intents),
    )
    decisions, pred = main  # the main data's, routed once by evaluate
    routed = routed_rows(decisions, pred)
    data_single = {
        **single_summary(pred, data.label_sets),
        "skills": skills_summary(routed, data.label_sets, cfg),
    }
    return {**source_section(ds), **metrics, "data_single": data_single}


def predict_in_batches(
    predictor: Predictor, texts: Sequence[str], batch_size: int = PREDICT_BATCH
) -> tuple[np.ndarray, np.ndarray | None]:
    """(probabilities, in-scope distances or None when the predictor has no distance)."""
    with_distance = getattr(predictor, "predict_with_distance", None)
    probs, dists = [], []
    for i in range(0, len(texts), batch_size):
        chunk = list(texts[i : i + batch_size])
        if with_distance is not None:
            p, d = with_distance(chunk)
            dists.append(d)
        else:
            p = predictor.predict_proba(chunk)
        probs.append(p)
    if not probs:
        return np.zeros((0, len(predictor.labels))), None
    has_dist = dists and all(d is not None for d in dists)
    return np.concatenate(probs, axis=0), (np.concatenate(dists) if has_dist else None)


def run_evaluation(
    model: str | Path | None,
    data: str | Path,
    *,
    oos: str | Path | None = None,
    compound: str | Path | None = None,
    conversations: str | Path | None = None,
    threshold: float | None = None,
    variant: str | None = None,
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
    config: RouterConfig | str | Path | None = None,
    fit_thresholds: float | None = None,
    tools: str | Path | None = None,
    tool_data: str | Path | None = None,
) -> dict:
    """Evaluate a model on labeled ``data`` (and unlabeled out-of-scope ``oos``, and the compound
    requests and their single-intent twins of ``compound``, scored apart); return the report dict.

    ``predictor`` is any Predictor; without one, ``model`` (an exported model directory) is opened with
    ONNX Runtime (``training.measure.backends.load_predictor`` also opens SetFit checkpoints). ``model`` is recorded
    in the report either way. ``threshold`` defaults to the router's (0.75). ``verifier`` (a
    router.verifier.Verifier) adds the verifier lift on below-threshold messages.
    ``max_latency_samples=0`` skips the latency measurement. ``conversations`` (a conversation file,
    eval.metrics.conversation_turns) routes conversations turn by turn through the router over ``model``, an exported
    model directory. ``config``: the router config (a file, or loaded) whose threshold, skills and roles
    the report uses; default: the shipped one. ``fit_thresholds`` (a target precision) adds each intent's
    threshold fitted on ``data`` (eval.metrics.intent_thresholds). ``tools`` (a registry), ``tool_data``:
    the tools section (eval.metrics.tool_selection)."""
    cfg = config if isinstance(config, RouterConfig) else RouterConfig.load(config)
    tau = validate_threshold(threshold if threshold is not None else cfg.threshold)
    if predictor is None:
        if model is None:
            raise ValueError("give a model path or a predictor")
        predictor = load_onnx_predictor(model, variant=variant)
    labels = list(predictor.labels)
    columns = dict(text_column=text_column, label_column=label_column, skip_invalid=skip_invalid)
    ds, ods, cds = _load_data(data, oos, compound, labels, split, **columns)
    ev = evaluate(
        predictor,
        ds,
        oos=ods,
        compound=cds,
        tau=tau,
        n_bins=n_bins,
        taus=taus,
        max_latency_samples=max_latency_samples,
        config=cfg,
        router=router_for(predictor, cfg, threshold),  # without --threshold, the config's per intent too
    )
    report = _report(model, predictor, ds, ev, tau, text_column, label_column)
    if fit_thresholds is not None:
        from eval.metrics.intent_thresholds import fit_intent_thresholds

        report["intent_thresholds"] = fit_intent_thresholds(ev.probs, ev.y, labels, tau, fit_thresholds)
    routed = None  # the router conversations and tools are measured through, loaded once
    if conversations is not None or tools is not None:
        routed = _router(model, variant, threshold, cfg, tools)
    if conversations is not None:
        from eval.metrics.conversation_turns import evaluate_conversations

        report["conversation"] = evaluate_conversations(routed, conversations)
    if tools is not None:
        from eval.metrics.tool_selection import tool_section

        report["tools"] = tool_section(routed, tool_data)
    if verifier is not None:
        from eval.metrics.verifier_lift import verifier_lift

        report["verifier"] = verifier_lift(
            verifier, ds.texts, ev.y, ev.probs, labels, tau, max_messages=verifier_max, describe=verifier_name
        )
    return report


def _load_data(data, oos, compound, labels, split, *, text_column, label_column, skip_invalid):
    """The labelled data, the out-of-scope file and the compound file (None when not given)."""
    ds = load_labeled(
        data,
        labels=labels,
        text_column=text_column,
        label_column=label_column,
        split=split,
        skip_invalid=skip_invalid,
    )
    ods = None
    if oos is not None:
        ods = load_unlabeled(oos, text_column=text_column, split=split, skip_invalid=skip_invalid)
    cds = None
    if compound is not None:
        cds = load_labeled(
            compound,
            labels=labels,
            text_column=text_column,
            label_column=label_column,
            skip_invalid=skip_invalid,
        )
    return ds, ods, cds


def _report(model, predictor, ds, ev, tau: float, text_column: str, label_column: str) -> dict:
    """The report dict with its evaluated sections; conversation and verifier are filled after."""
    labels = list(predictor.labels)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": REPORT_KIND,
        "created_at": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "model": _model_section(model, predictor),
        "data": {
            **source_section(ds),
            "text_column": text_column,
            "label_column": label_column,
            "label_counts": {l: int((ev.y == i).sum()) for i, l in enumerate(labels)},
        },
        "threshold": round(tau, 4),
        **ev.sections,
        "conversation": None,
        "tools": None,
        "verifier": None,
        "environment": _environment(),
    }


def _router(model, variant: str | None, tau: float | None, cfg, tools) -> Router:
    from router.manifest import load_manifest

    if model is None or load_manifest(model).export is None:
        raise ValueError("conversations and tools are routed by the router: give an exported model directory")
    return Router.load(model, cfg, variant=variant, threshold=tau, tools=tools)


def source_section(ds) -> dict:
    return {
        "source": ds.source,
        "format": ds.format,
        "split": ds.split,
        "sha256": ds.sha256,
        "n": len(ds),
        "skipped": [{"row": p["row"], "line": p["line"], "reason": p["reason"]} for p in ds.skipped],
    }


def _oos_accepted(ods, decisions: Sequence[Decision]) -> list[dict]:
    """Out-of-scope messages the router routes to intents of their own, the surest first."""
    hits = [i for i, d in enumerate(decisions) if d.reason_code in ACCEPTED]
    hits.sort(key=lambda i: -(decisions[i].confidence or 0.0))
    return [
        {
            "row": ods.rows[i],
            "text": ods.texts[i],
            "predicted": decisions[i].intent,
            "confidence": round(float(decisions[i].confidence or 0.0), 6),
        }
        for i in hits[:MAX_OOS_ACCEPTED]
    ]


def _model_section(model, predictor: Predictor) -> dict:
    m = getattr(predictor, "manifest", None)
    return {
        "path": str(model) if model is not None else None,
        "backend": getattr(predictor, "backend", type(predictor).__name__),
        "variant": getattr(predictor, "variant", None),
        "model_id": getattr(predictor, "model_id", type(predictor).__name__),
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
