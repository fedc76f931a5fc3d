"""What the router does with each message, counted from the Decisions route() returns.

A report's routed figures (in scope accepted / below the threshold / called out of scope, out-of-scope
messages not routed, the skills a message loads) are read from ``Router.route_batch``, with no verifier,
so per-intent thresholds, intents defined by examples, the language check, the guardrail, the compound
rule and continuations count exactly as they route. An exported model routes with its own ONNX
classifier; any other predictor (the PyTorch model) routes through ``PredictorClassifier``, which gives
the router the predictor's probabilities, distances and compound intents.

The threshold sweeps (eval.metrics.thresholds, eval.metrics.out_of_scope.scope_sweep) stay what-ifs over the probabilities: the
share a single router-wide threshold would accept, at each of several thresholds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from eval.metrics.two_intent import Routed, has_compound_head
from router.classification import Classification
from router.config import RouterConfig
from router.decision import Decision, ReasonCode
from router.routing import Router

#: the reasons for which a message is routed to intents of its own (not out of scope, not the fallback)
ACCEPTED = frozenset({ReasonCode.CONFIDENT, ReasonCode.CONFIDENT_COMPOUND, ReasonCode.MATCHED_EXAMPLES})
ROUTE_BATCH = 64


class PredictorClassifier:
    """A RoutingClassifier over any Predictor (eval.metrics.predictors): the router decides from its probabilities,
    and from its in-scope distance and compound intents when it has them."""

    def __init__(self, predictor) -> None:
        self.predictor = predictor
        self.labels = list(predictor.labels)
        self.model_id = getattr(predictor, "model_id", type(predictor).__name__)
        self.label_counts = None
        self.distance_threshold = getattr(predictor, "distance_threshold", None)

    def classify_batch(self, texts: Sequence[str]) -> list[Classification]:
        texts = list(texts)
        scores, intents, clauses = None, [[] for _ in texts], [[] for _ in texts]
        if has_compound_head(self.predictor):
            probs, dist, scores, intents, clauses = self.predictor.predict_compound(texts)
        elif callable(getattr(self.predictor, "predict_with_distance", None)):
            probs, dist = self.predictor.predict_with_distance(texts)
        else:
            probs, dist = self.predictor.predict_proba(texts), None
        heads = list(getattr(self.predictor, "compound_intents", []) or [])
        out = []
        for i, row in enumerate(np.asarray(probs, dtype=np.float64)):
            order = np.argsort(-row)
            ranking = [(self.labels[j], float(row[j])) for j in order]
            out.append(
                Classification(
                    label=ranking[0][0],
                    confidence=ranking[0][1],
                    ranking=ranking,
                    distance=None if dist is None else float(dist[i]),
                    intent_scores=None
                    if scores is None
                    else dict(zip(heads, map(float, scores[i]), strict=True)),
                    intents=list(intents[i]),
                    clauses=list(clauses[i]),
                )
            )
        return out


def router_for(predictor, config: RouterConfig, threshold: float | None) -> Router:
    """The router eval counts with: ``config``'s thresholds (per intent too), or ``threshold`` for all."""
    classifier = getattr(predictor, "classifier", None)  # an exported model's own ONNX classifier
    return Router(classifier or PredictorClassifier(predictor), config, threshold=threshold)


def decide(router: Router, texts: Sequence[str]) -> list[Decision]:
    """Each message's Decision, routed alone (no previous turn), for a role the config defines."""
    role = next(iter(router.config.roles), "eval")
    decisions: list[Decision] = []
    for i in range(0, len(texts), ROUTE_BATCH):
        decisions += router.route_batch(list(texts[i : i + ROUTE_BATCH]), role)
    return decisions


def decided_outcomes(decisions: Sequence[Decision], pred: np.ndarray) -> dict[str, np.ndarray]:
    """eval.metrics.out_of_scope.outcomes's arrays, from the Decisions: ``pred`` (the classifier's top label, given),
    ``by_classifier`` / ``by_distance`` (the out-of-scope signals the router saw), ``out_of_scope``
    (routed out of scope), ``accepted`` (routed to intents of its own) and ``below`` (neither)."""

    def mask(test) -> np.ndarray:
        return np.array([bool(test(d)) for d in decisions], dtype=bool)

    signals = [d.scope.signals if d.scope is not None else [] for d in decisions]
    out_of_scope = mask(lambda d: d.reason_code == ReasonCode.OUT_OF_SCOPE)
    accepted = mask(lambda d: d.reason_code in ACCEPTED)
    return {
        "pred": np.asarray(pred, dtype=int),
        "by_classifier": np.array(["classifier" in s for s in signals], dtype=bool),
        "by_distance": np.array(["distance" in s for s in signals], dtype=bool),
        "out_of_scope": out_of_scope,
        "accepted": accepted,
        "below": ~out_of_scope & ~accepted,
    }


def routed_rows(decisions: Sequence[Decision], predicted: list[list[str]]) -> Routed:
    """eval.metrics.two_intent.Routed from the Decisions: the skills each loads before RBAC (granted and denied)."""
    status, skills = [], []
    for d in decisions:
        if d.reason_code == ReasonCode.OUT_OF_SCOPE:
            status.append("out_of_scope")
        else:
            status.append("accepted" if d.reason_code in ACCEPTED else "fallback")
        skills.append([*d.skills.required, *d.skills.optional, *(x.skill for x in d.denied)])
    budget = np.array([d.context_budget for d in decisions], dtype=np.float64)
    return Routed(predicted, status, skills, budget)
