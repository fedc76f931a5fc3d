"""One seed of a public benchmark: sample, train one SetFit model (training.fit.intent_model.IntentModel, the
same fitting code as ``training.fit.train``), and score it on the test split; ``training.benchmarks.runner`` runs the
seeds and summarises them.

Protocol (k-shot): sample k training rows per class with a fixed seed, train, evaluate on the whole
test split. A temperature is fitted on val where the dataset has one (CLINC150).
For CLINC150 the out-of-scope threshold is chosen on val (in-scope val + oos_val) only, then applied
to test + oos_test: a message is accepted when its top probability is >= tau, and an out-of-scope
message is caught when it is not accepted. With ``oos_class`` (CLINC150 only) oos_train is trained as
one more class instead (Larson et al.'s "extra class"): no threshold, arg-max on test + oos_test, and
again with the in-scope distance on top, and at the operating point (distance keep, probability tau)
chosen on val for an in-scope accuracy floor.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Sequence

import numpy as np

from training.benchmarks.public_data import BenchmarkDataError, Split, k_shot

Reporter = Callable[[str], None]


# --oos-class operating points (_operating_points): the distance threshold keeps `keep` of in-scope val
DEFAULT_IN_SCOPE_FLOOR = 0.92  # the out-of-scope issue's floor for CLINC150's in-scope accuracy
KEEPS = (1.0, 0.99, 0.98, 0.97, 0.96, 0.95, 0.94, 0.93, 0.92, 0.9, 0.88, 0.85)
TAUS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def seed_run(
    name: str,
    splits: dict[str, Split],
    shots: int | None,
    seed: int,
    config,
    report: Reporter,
    show_progress: bool,
    oos_class: bool = False,
    in_scope_floor: float = DEFAULT_IN_SCOPE_FLOOR,
) -> dict:
    """Train on seed ``seed``'s sample of ``splits`` and return the run's results: rows, temperature, val
    and test accuracy, out-of-scope results (``_threshold_results``, or with ``oos_class``
    ``_extra_class_results`` and ``_operating_points``) and seconds. Reports a line with the headline."""
    from eval.metrics.evaluator import split_metrics
    from training.fit.intent_model import IntentModel

    t_start = time.perf_counter()
    train = k_shot(splits["train"], shots, seed) if shots else splits["train"]
    val_parts = (splits.get("val"), splits.get("oos_val"))  # before oos_val joins val
    if oos_class:  # Larson et al.'s "extra class": oos_train is one more class; oos_val joins val
        splits = dict(splits)
        train = _with_oos(train, splits["oos_train"])
        splits["val"] = _with_oos(splits["val"], splits["oos_val"])
    report(f"[{name} seed {seed}] training on {len(train)} rows ({len(train.classes)} classes)")
    model = IntentModel(config).fit(train.texts, train.labels, report, show_progress)
    seconds = dict(model.fit_seconds)
    t0 = time.perf_counter()

    def ids(labels: Sequence[str]) -> np.ndarray:
        try:
            return model.label_ids(labels)
        except ValueError as e:
            raise BenchmarkDataError(f"evaluation {e}") from e

    run: dict = {"seed": seed, "train_rows": len(train)}
    val = splits.get("val")
    if val is not None:
        y_val = ids(val.labels)
        run["temperature"] = model.calibrate(val.texts, val.labels)
        val_probs = model.predict_proba(val.texts)
        run["val"] = {"accuracy": float((val_probs.argmax(axis=1) == y_val).mean())}
    else:
        run["temperature"] = None  # no val split: probabilities stay uncalibrated (T = 1)

    test = splits["test"]
    y_test = ids(test.labels)
    probs, dist = model.predict_with_distance(test.texts)  # one encoding for every use of test below
    m = split_metrics(probs, y_test, model.labels)
    run["test"] = {k: m[k] for k in ("n", "accuracy", "macro_f1", "ece", "nll")}

    if oos_class:
        t_in, t_oos = (probs, dist, y_test), model.predict_with_distance(splits["oos_test"].texts)
        run["oos_class"] = _extra_class_results(model, t_in, t_oos)
        if all(p is not None for p in val_parts) and model.distance_threshold is not None:
            run["oos_class"]["operating_points"] = _operating_points(
                model, val_parts, t_in, t_oos, in_scope_floor
            )
    elif "oos_val" in splits and val is not None:
        run.update(_threshold_results(model, splits, (val_probs, y_val), (probs, y_test)))
    seconds["eval"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_start
    run["seconds"] = {k: round(v, 2) for k, v in seconds.items()}
    report(_run_line(name, seed, run) + f" ({seconds['total']:.0f}s)")
    model.setfit = None  # free the torch weights before the next seed
    gc.collect()
    return run


def _threshold_results(model, splits: dict[str, Split], v: tuple, t: tuple) -> dict:
    """The out-of-scope threshold chosen on val + oos_val and applied to test + oos_test, by the balanced
    criterion (``oos``, the headline result) and the pooled one (``oos_pooled``). ``v`` and ``t`` are val's
    and test's (probabilities, label ids)."""
    from eval.metrics.thresholds import choose_threshold, in_scope_at_threshold

    (val_probs, y_val), (probs, y_test) = v, t
    out = {}
    oos_val_conf = model.predict_proba(splits["oos_val"].texts).max(axis=1)
    oos_test_conf = model.predict_proba(splits["oos_test"].texts).max(axis=1)
    for key, criterion in (("oos", "balanced"), ("oos_pooled", "pooled")):  # "oos" is the headline result
        chosen = choose_threshold(
            val_probs.max(axis=1), val_probs.argmax(axis=1) == y_val, oos_val_conf, criterion
        )
        res = in_scope_at_threshold(
            probs.max(axis=1), probs.argmax(axis=1) == y_test, oos_test_conf, chosen["tau"]
        )
        out[key] = {
            **chosen,
            "n_val": len(splits["oos_val"]),
            "n_test": len(splits["oos_test"]),
            "test_in_scope_accuracy": res["in_scope_accuracy"],
            "test_in_scope_accepted_share": res["in_scope_accepted_share"],
            "test_oos_recall": res["oos_recall"],
        }
    return out


def _run_line(name: str, seed: int, run: dict) -> str:
    """The seed's headline: test accuracy and macro-F1, and the out-of-scope results it has."""
    line = f"[{name} seed {seed}] test accuracy {run['test']['accuracy']:.4f} macro-F1 {run['test']['macro_f1']:.4f}"
    if "oos" in run:
        o = run["oos"]
        line += f"; tau {o['tau']:.3f}: in-scope {o['test_in_scope_accuracy']:.4f}, oos recall {o['test_oos_recall']:.4f}"
    if "oos_class" in run:
        o = run["oos_class"]["with_distance"]
        line += f"; extra class + distance: in-scope {o['in_scope_accuracy']:.4f}, oos recall {o['oos_recall']:.4f}"
    return line


def _with_oos(split: Split, oos: Split) -> Split:
    from router.intents import OUT_OF_SCOPE

    return Split(split.texts + oos.texts, split.labels + [OUT_OF_SCOPE] * len(oos))


def _extra_class_results(model, t_in: tuple, t_oos: tuple) -> dict:
    """In-scope accuracy and out-of-scope recall on test + oos_test with the out-of-scope class (arg-max,
    no threshold, as Larson et al.), and with the in-scope distance on top (out of scope when above the
    threshold fitted on in-scope val). ``t_in`` is test's (probabilities, distances, label ids), ``t_oos``
    oos_test's (probabilities, distances)."""
    from router.intents import OUT_OF_SCOPE

    col = model.labels.index(OUT_OF_SCOPE)
    (probs_in, dist_in, y_test), (probs_oos, dist_oos) = t_in, t_oos
    pred_in, pred_oos = probs_in.argmax(axis=1), probs_oos.argmax(axis=1)
    out = {
        "n_test": len(probs_in),
        "n_oos_test": len(probs_oos),
        "extra_class": {
            "in_scope_accuracy": float((pred_in == y_test).mean()),
            "oos_recall": float((pred_oos == col).mean()),
        },
    }
    limit = model.distance_threshold
    if dist_in is not None and limit is not None:
        far_in, far_oos = dist_in > limit, dist_oos > limit
        out["with_distance"] = {
            "distance_threshold": limit,
            "in_scope_accuracy": float(((pred_in == y_test) & ~far_in).mean()),
            "oos_recall": float(((pred_oos == col) | far_oos).mean()),
            "oos_only_by_distance": float((far_oos & (pred_oos != col)).mean()),
        }
    return out


def _operating_points(model, val_parts, t_in: tuple, t_oos: tuple, floor: float) -> dict:
    """Out of scope when the arg-max is the out-of-scope class, the distance is above the threshold that
    keeps ``keep`` of in-scope val, or the top probability is under ``tau``. Returns the curve over keep
    (tau 0) on val and test, and the (keep, tau) with the best val out-of-scope recall among those whose
    val in-scope accuracy is at least ``floor`` (ties: the better in-scope accuracy), with its test figures.
    Everything is chosen on val; test (``t_in``, ``t_oos`` as in _extra_class_results) is only read."""
    from router.intents import OUT_OF_SCOPE

    col = model.labels.index(OUT_OF_SCOPE)

    val, oos_val = val_parts
    v_in = (*model.predict_with_distance(val.texts), model.label_ids(val.labels))
    v_oos = model.predict_with_distance(oos_val.texts)
    limits = {k: (float(np.quantile(v_in[1], k)) if k < 1 else float("inf")) for k in KEEPS}

    def point(ins, oos, limit: float, tau: float) -> dict:
        def flagged(probs, dist):
            return (probs.argmax(axis=1) == col) | (dist > limit) | (probs.max(axis=1) < tau)

        correct = (ins[0].argmax(axis=1) == ins[2]) & ~flagged(ins[0], ins[1])
        return {
            "in_scope_accuracy": float(correct.mean()),
            "oos_recall": float(flagged(oos[0], oos[1]).mean()),
        }

    curve = [
        {"keep": k, "val": point(v_in, v_oos, limits[k], 0.0), "test": point(t_in, t_oos, limits[k], 0.0)}
        for k in KEEPS
    ]
    grid = [(k, tau, point(v_in, v_oos, limits[k], tau)) for k in KEEPS for tau in TAUS]
    ok = [g for g in grid if g[2]["in_scope_accuracy"] >= floor]
    chosen = None
    if ok:
        k, tau, on_val = max(ok, key=lambda g: (g[2]["oos_recall"], g[2]["in_scope_accuracy"]))
        chosen = {
            "keep": k,
            "tau": tau,
            "distance_threshold": limits[k],
            "val": on_val,
            "test": point(t_in, t_oos, limits[k], tau),
        }
    return {"in_scope_floor": floor, "curve": curve, "chosen_on_val": chosen}
