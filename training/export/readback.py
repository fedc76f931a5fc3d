"""The whole model read back from an exported graph: the checkpoint its build would have left.

training.export.recover reads the body and the heads' weights out of the graph; this module puts them together as a
SetFit model with its in-scope distance and compound head (training.fit.intent_model.IntentModel), checks it against the
graph and writes it. A model that ships without its checkpoint can then be run in PyTorch (the SetFit reference
of ``intent-router bench speed``) and exported again (``intent-router export``: e.g. its fp32 graph, for a CPU
where int8 does not pay).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from router.manifest import ModelError, verify_file
from training.export.graph_weights import graph_head, graph_one_vs_rest, graph_scope
from training.export.recover import PROBE_TEXTS, Recovered, recovered_body, recovered_line, write_recovered


def recover_model(
    model_dir: str | Path,
    out_dir: str | Path,
    variant: str | None = None,
    base_model: str | None = None,
    report: Callable[[str], None] = print,
) -> dict:
    """Write the exported model in ``model_dir`` to ``out_dir`` as the checkpoint its build would have
    left: the body (``recovered_body``), the logistic head (``graph_head``), and, when the manifest has them,
    the in-scope distance (``graph_scope``) and the compound head (``graph_one_vs_rest``, its settings from
    the manifest, its clause reader from the model's file). ``training.fit.intent_model.IntentModel.load(out_dir,
    manifest)`` then gives the model in PyTorch on a machine that never built it: ``intent-router bench
    speed`` times it as the SetFit reference, and ``intent-router export`` can export it again, e.g. with
    the fp32 graph for a CPU where int8 does not pay.

    It is checked on ``PROBE_TEXTS`` against the graph: every top label and in-scope flag must be the
    graph's, or nothing is written. Returns the note, with the largest differences found."""
    from training.libraries import quiet_libraries

    quiet_libraries()
    rec = recovered_body(model_dir, variant, base_model)
    manifest, note = rec.manifest, dict(rec.note)
    model = _with_head(rec)
    if manifest.in_scope is not None:
        model.scope = _scope_of(rec)
    if manifest.compound is not None:
        model.compound = _compound_of(rec, Path(model_dir))
    note.update(_compare_heads(model, rec))
    if note["top1_agreement"] < 1.0 or note.get("in_scope_agreement", 1.0) < 1.0:
        raise ModelError(
            f"the PyTorch model read from {note['graph']} does not give the graph's top label and in-scope "
            f"flag on every probe text (agreement {note['top1_agreement']:.3f} / "
            f"{note.get('in_scope_agreement', 1.0):.3f}): nothing written"
        )
    write_recovered(out_dir, model.save, note)
    report(
        f"{recovered_line(note)}; probabilities against the graph's: max |dp| {note['max_abs_prob_diff']:.4f}"
    )
    return note


def _with_head(rec: Recovered):
    """The recovered body with the graph's logistic head, after checking that the graph's softmax scale is
    the manifest's temperature and its outputs the manifest's labels."""
    from setfit import SetFitModel

    from training.fit.head import head_from_softmax_weights
    from training.fit.intent_model import IntentModel

    manifest = rec.manifest
    coef, intercept, scale = graph_head(rec.graph, manifest.export.output)
    temperature = manifest.calibration.temperature if manifest.calibration is not None else 1.0
    if not np.isclose(scale * temperature, 1.0, rtol=1e-4):
        raise ModelError(
            f"the graph scales its logits by {scale:.6g} before the softmax, but the manifest's temperature "
            f"is {temperature:.6g}: the graph and the manifest describe different models"
        )
    if coef.shape[0] != len(manifest.labels):
        raise ModelError(
            f"the graph's head has {coef.shape[0]} outputs, the manifest {len(manifest.labels)} labels"
        )
    head = head_from_softmax_weights(coef, intercept, manifest.labels)
    setfit = SetFitModel(model_body=rec.body, model_head=head, labels=list(manifest.labels))
    return IntentModel(setfit=setfit, temperature=temperature, manifest=manifest)


def _scope_of(rec: Recovered):
    """The in-scope distance read from the graph: its factor and centres give back the class means."""
    from training.fit.distance import InScopeDistance

    spec = rec.manifest.in_scope
    factor, centres = graph_scope(rec.graph, spec.output)
    if centres.shape[0] != len(spec.classes):
        raise ModelError(
            f"the graph's in-scope distance has {centres.shape[0]} classes, the manifest {len(spec.classes)}"
        )
    means = np.linalg.solve(factor.T, centres.T).T  # centres = means @ factor
    return InScopeDistance(
        list(spec.classes), means, factor, spec.shrinkage, threshold=spec.threshold, keep=spec.keep
    )


def _compound_of(rec: Recovered, model_dir: Path):
    """The compound head: its one-vs-rest weights from the graph, its settings from the manifest, its
    clause reader from the model's file."""
    from training.fit.compound_head import CompoundHead

    spec = rec.manifest.compound
    ovr, ovr_bias = graph_one_vs_rest(rec.graph, spec.output)
    reader = {}
    if spec.reader is not None:
        if spec.reader.file is None:
            raise ModelError(f"{model_dir}: the manifest's clause reader has no head file")
        z = np.load(verify_file(model_dir, spec.reader.file))
        reader = dict(
            reader_layers=list(spec.reader.layers), reader_coef=z["coef"], reader_intercept=z["intercept"]
        )
    return CompoundHead(
        intents=list(spec.intents),
        coef=ovr,
        intercept=ovr_bias,
        weights=list(spec.weights),
        bias=spec.bias,
        primary_order=dict(spec.primary_order),
        clause_min=spec.clause_min,
        threshold=spec.threshold,
        whole_threshold=spec.whole_threshold,
        max_single_compound=spec.max_single_compound,
        **reader,
    )


def _compare_heads(model, rec: Recovered) -> dict:
    """The recovered model's heads against the graph's outputs on PROBE_TEXTS."""
    manifest = rec.manifest
    emb = model.encode(PROBE_TEXTS)
    ours = model.predict_proba(PROBE_TEXTS)
    theirs = rec.probe[manifest.export.output]
    out = {
        "max_abs_prob_diff": float(np.abs(ours - theirs).max()),
        "top1_agreement": float((ours.argmax(axis=1) == theirs.argmax(axis=1)).mean()),
    }
    if model.scope is not None:
        d, g = model.scope.distance(emb), rec.probe[manifest.in_scope.output]
        limit = manifest.in_scope.threshold
        out["max_rel_distance_diff"] = float((np.abs(d - g) / np.maximum(np.abs(g), 1e-9)).max())
        out["in_scope_agreement"] = float(((d > limit) == (g > limit)).mean())
    if model.compound is not None:
        out["max_abs_score_diff"] = float(
            np.abs(model.compound.scores(emb) - rec.probe[manifest.compound.output]).max()
        )
    return out
