"""Compound-request metrics: messages that ask for two things (data/compound/), by the router's rules.

Per message, two predictions:

- *classifier level* (before the threshold): the intents ``router.compound.resolve_intents`` gives
  (the predictor's ``predict_compound``), or the arg-max label;
- *router level* (no verifier): what route() did with it (eval.metrics.routed.routed_rows): out of scope loads
  nothing; a message routed to its intents loads their skills; any other (below its threshold, a
  continuation with no previous turn, ...) loads the skills of the config's fallback intents, or none.

A predictor without a compound head (no ``predict_compound`` or no ``compound_spec``) calls every
message single-intent, and the section still reports, so that a gate shows the regression.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from eval.metrics.classifier_metrics import rounded as _r
from router.compound import compound_confidence, merge_skills
from router.config import RouterConfig
from router.intents import OUT_OF_SCOPE


@dataclass
class Routed:
    """Per message: classifier-level intents, what the router does, and what it loads."""

    predicted: list[list[str]]  # arg-max label, then the second intent if any (before the threshold)
    status: list[str]  # "accepted", "fallback" (below tau, no verifier) or "out_of_scope"
    skills: list[list[str]]  # required + optional skills loaded (fallback included; [] out of scope)
    budget: np.ndarray  # context budget loaded (0 out of scope)


def has_compound_head(predictor) -> bool:
    """Whether ``predictor`` finds compound requests (``predict_compound`` and a ``compound_spec``)."""
    return callable(getattr(predictor, "predict_compound", None)) and (
        getattr(predictor, "compound_spec", None) is not None
    )


def head_arguments(predictor, intents: list[list[str]] | None) -> dict:
    """``intents`` and ``compound_threshold`` for the functions below (None without a compound head)."""
    if intents is None:
        return {"intents": None, "compound_threshold": None}
    return {"intents": intents, "compound_threshold": float(predictor.compound_spec.threshold)}


def predict_compound_in_batches(
    predictor, texts: Sequence[str], batch_size: int
) -> tuple[np.ndarray, np.ndarray | None, list[list[str]], np.ndarray]:
    """(probabilities, distances or None, intents per message, their confidence by
    router.compound.compound_confidence) of a predictor with a compound head."""
    labels = list(predictor.labels)
    probs, dists, intents, pair = [np.zeros((0, len(labels)))], [], [], []
    for i in range(0, len(texts), batch_size):
        p, d, _, found, clauses = predictor.predict_compound(list(texts[i : i + batch_size]))
        probs.append(np.asarray(p, dtype=np.float64))
        dists.append(d)
        intents += [list(x) for x in found]
        pair += [
            compound_confidence(dict(zip(labels, map(float, row), strict=True)), f, c)
            for row, f, c in zip(p, found, clauses, strict=True)
        ]
    has_dist = dists and all(d is not None for d in dists)
    dist = np.concatenate([np.asarray(d, np.float64) for d in dists]) if has_dist else None
    return np.concatenate(probs), dist, intents, np.asarray(pair, dtype=np.float64)


def predicted_intents(
    probs: np.ndarray, labels: Sequence[str], intents: Sequence[Sequence[str]] | None = None
) -> list[list[str]]:
    """Classifier level: the predictor's intents, or [arg-max label] (also for a label that is not an
    intent, such as OUT_OF_SCOPE)."""
    pred = np.asarray(probs).argmax(axis=1) if len(probs) else np.zeros(0, int)
    return [
        list(intents[i]) if intents is not None and intents[i] else [labels[j]] for i, j in enumerate(pred)
    ]


def _share(mask) -> float | None:
    mask = np.asarray(mask, dtype=bool)
    return _r(float(mask.mean())) if len(mask) else None


def single_summary(predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]]) -> dict:
    """In-scope single-intent rows: ``accuracy`` (primary right), ``exact`` (right and single) and
    ``called_compound`` (a second intent predicted)."""
    rows = [i for i, g in enumerate(gold) if len(g) == 1 and g[0] != OUT_OF_SCOPE]
    return {
        "n": len(rows),
        "accuracy": _share([predicted[i][:1] == list(gold[i]) for i in rows]),
        "exact": _share([list(predicted[i]) == list(gold[i]) for i in rows]),
        "called_compound": _share([len(predicted[i]) > 1 for i in rows]),
    }


def compound_summary(r: Routed, gold: Sequence[Sequence[str]], config: RouterConfig) -> dict:
    """Compound rows: ``both_found`` (predicted set == gold set), ``exact_order``, ``primary_correct``
    (classifier level); ``skills_of_both_loaded`` (router level: the required skills of both gold
    intents among those loaded, fallback included) and the share accepted / fallback / out of scope."""
    rows = [i for i, g in enumerate(gold) if len(g) > 1]
    p, st = r.predicted, r.status

    def both_loaded(i: int) -> bool:
        needed = {s for x in gold[i] for s in config.intents[x].required}
        return needed <= set(r.skills[i])

    return {
        "n": len(rows),
        "both_found": _share([set(p[i]) == set(gold[i]) for i in rows]),
        "exact_order": _share([list(p[i]) == list(gold[i]) for i in rows]),
        "primary_correct": _share([p[i][0] == gold[i][0] for i in rows]),
        "skills_of_both_loaded": _share([both_loaded(i) for i in rows]),
        "accepted": _share([st[i] == "accepted" for i in rows]),
        "fallback": _share([st[i] == "fallback" for i in rows]),
        "out_of_scope": _share([st[i] == "out_of_scope" for i in rows]),
    }


def per_intent_metrics(
    predicted: Sequence[Sequence[str]], gold: Sequence[Sequence[str]], intents: Sequence[str]
) -> dict:
    """Multi-label precision / recall / F1 / support per intent (predicted set vs gold set, classifier
    level) over every message, and their macro average over ``intents``."""
    from sklearn.metrics import precision_recall_fscore_support

    def indicator(sets):
        return np.array([[x in s for x in intents] for s in sets], dtype=int).reshape(-1, len(intents))

    y_true, y_pred = indicator(gold), indicator(predicted)
    p, rec, f, s = precision_recall_fscore_support(y_true, y_pred, average=None, zero_division=0)
    per = {
        x: {"precision": _r(p[j]), "recall": _r(rec[j]), "f1": _r(f[j]), "support": int(s[j])}
        for j, x in enumerate(intents)
    }
    return {"per_intent": per, "macro_f1": _r(float(np.mean(f)))}


def skills_summary(r: Routed, gold: Sequence[Sequence[str]], config: RouterConfig) -> dict:
    """Skills and context budget loaded per message (router level, mean over every row), beside routing
    to the gold intents and loading every skill: ``token_savings`` is 1 - mean budget / every-skill budget."""
    every_req, every_opt, every_budget = merge_skills(list(config.intents.values()))
    ideal = [merge_skills([config.intents[x] for x in g if x in config.intents]) for g in gold]
    mean_budget = float(r.budget.mean()) if len(r.budget) else None
    return {
        "skills_per_message": _r(float(np.mean([len(s) for s in r.skills]))) if r.skills else None,
        "budget_per_message": _r(mean_budget),
        "gold_skills_per_message": _r(float(np.mean([len(a) + len(b) for a, b, _ in ideal]))),
        "gold_budget_per_message": _r(float(np.mean([b for _, _, b in ideal]))),
        "every_skill": {"skills": len(every_req) + len(every_opt), "budget": every_budget},
        "token_savings": _r(1 - mean_budget / every_budget)
        if mean_budget is not None and every_budget
        else None,
    }


def compound_metrics(
    gold: Sequence[Sequence[str]],
    tau: float,
    *,
    routed: Routed,
    intents: Sequence[Sequence[str]] | None = None,
    compound_threshold: float | None = None,
    config: RouterConfig | None = None,
) -> dict:
    """The report's compound metrics over messages with gold label sets (primary first): ``routed`` says
    what the router did with each (eval.metrics.routed.routed_rows, or ``route_rows``); ``intents`` are the
    predictor's (None without a compound head)."""
    cfg = config or RouterConfig.load()
    head = intents is not None
    return {
        "compound_head": head,
        "compound_threshold": _r(compound_threshold, 4) if head and compound_threshold is not None else None,
        "tau": _r(tau, 4),
        "compound": compound_summary(routed, gold, cfg),
        "single": single_summary(routed.predicted, gold),
        **per_intent_metrics(routed.predicted, gold, list(cfg.intents)),
        "skills": skills_summary(routed, gold, cfg),
    }
