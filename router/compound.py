"""Compound requests: a message that asks for two things ("find the deck, then email it to Maria")
carries two intents, primary first (the end goal). The one rule that finds them lives here, so that the
router, the evaluator, export parity and training agree on it:

1. the primary is the classifier's top label; a message whose top label is not an intent has none;
2. the message is cut into clauses (router.clauses) and each clause is classified on its own, in a
   second graph run, or read in context from the message's own run (manifest ``compound.reader``: the
   clause's pooled token states through a head trained on the clause-alone probabilities);
3. a stacked score per intent combines the graph's one-vs-rest score for the whole message with the
   intent's best clause probability (manifest ``compound``: weights and bias);
4. two clauses of different intents (each >= ``clause_min``) make a compound request when every one of
   the two that is not the primary has a stacked score >= ``threshold``; without them, the best other
   intent is added when its stacked score reaches ``whole_threshold``;
5. the pair is ordered by ``primary_order`` (learnt from the training pairs), else the primary first.

Skills of several intents are merged here too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

import numpy as np

from router.clauses import split_clauses
from router.intents import RESERVED


def stacked_scores(spec, scores: Mapping[str, float], clause_best: Mapping[str, float]) -> dict[str, float]:
    """sigmoid(w0 * logit(one-vs-rest score) + w1 * best clause probability + w2 * [has clauses] + b)."""
    w, has = spec.weights, 1.0 if clause_best else 0.0
    out = {}
    for intent in spec.intents:
        q = _clip(scores.get(intent, 0.0))
        z = w[0] * math.log(q / (1 - q)) + w[1] * float(clause_best.get(intent, 0.0)) + w[2] * has + spec.bias
        out[intent] = 1.0 / (1.0 + math.exp(-z))
    return out


def resolve_intents(
    primary: str,
    spec,
    scores: Mapping[str, float] | None,
    clause_probs: Sequence[Mapping[str, float]] = (),
    threshold: float | None = None,
) -> list[str]:
    """The intents of one message, primary first ([] when ``primary`` is not an intent). ``spec`` is the
    manifest's Compound (None: single-intent model), ``scores`` the one-vs-rest scores, ``clause_probs``
    each clause's label -> probability. ``threshold`` overrides ``spec.threshold`` (fitting it)."""
    if primary in RESERVED:
        return []
    if spec is None or not scores:
        return [primary]
    t = spec.threshold if threshold is None else threshold
    if not clause_probs:  # only the whole-message path can add an intent: most messages are under its bound
        floor = whole_floor(spec, t)
        if all(_clip(scores.get(k, 0.0)) < floor for k in spec.intents if k != primary):
            return [primary]
    tops = [max(probs.items(), key=lambda kv: kv[1]) for probs in clause_probs]
    # clause intents: the best probability of each intent among the clauses it leads
    best = best_by_label({top: p} for top, p in tops if top not in RESERVED and p >= spec.clause_min)
    stacked = stacked_scores(spec, scores, best_by_label(clause_probs))
    if len(best) >= 2:
        a, b = sorted(best, key=lambda k: -best[k])[:2]
        if all(x == primary or stacked.get(x, 0.0) >= t for x in (a, b)):
            return order_pair(spec, a, b, primary)
    others = {k: v for k, v in stacked.items() if k != primary}
    if others:
        k = max(others, key=others.get)
        if others[k] >= max(t, spec.whole_threshold):
            return order_pair(spec, primary, k, primary)
    return [primary]


def best_by_label(rows: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each label's best probability over ``rows`` (label -> probability each; {} without rows)."""
    out: dict[str, float] = {}
    for row in rows:
        for label, p in row.items():
            out[label] = max(out.get(label, 0.0), float(p))
    return out


def flat_clauses(split: Sequence[Sequence[str]]) -> list[str]:
    """Every message's clauses in one list, message by message: what one graph run classifies."""
    return [c for clauses in split for c in clauses]


def clause_probabilities(
    split: Sequence[Sequence[str]], probs: np.ndarray, labels: Sequence[str]
) -> list[list[dict[str, float]]]:
    """Each message's clauses as label -> probability, from ``probs``: the rows of ``flat_clauses(split)``
    (calibrated probabilities in ``labels`` order)."""
    out, j = [], 0
    for clauses in split:
        out.append([dict(zip(labels, map(float, probs[j + n]), strict=True)) for n in range(len(clauses))])
        j += len(clauses)
    return out


def classify_clauses(
    split: Sequence[Sequence[str]], labels: Sequence[str], predict: Callable[[list[str]], np.ndarray]
) -> list[list[dict[str, float]]]:
    """Each message's clauses as label -> probability, all of them classified in one ``predict`` call
    (calibrated probabilities in ``labels`` order)."""
    flat = flat_clauses(split)
    return clause_probabilities(split, predict(flat) if flat else np.zeros((0, len(labels))), labels)


def order_pair(spec, a: str, b: str, primary: str) -> list[str]:
    """[end goal, prerequisite] by the pair's learnt order; else the classifier's primary first."""
    first = spec.primary_order.get(pair_key(a, b))
    if first not in (a, b):
        first = primary if primary in (a, b) else a
    return [first, b if first == a else a]


def pair_key(a: str, b: str) -> str:
    return "+".join(sorted((a, b)))


def resolve_batch(
    texts: Sequence[str],
    primaries: Sequence[str],
    spec,
    scores: np.ndarray | None,
    read: Callable[[list[list[str]]], list[list[dict[str, float]]]],
    threshold: float | None = None,
) -> tuple[list[list[str]], list[list[dict]]]:
    """Intents of many messages, for a caller that reads clauses through ``read``: each message's clauses
    to read (``clauses_of_batch``) go to ``read``, which gives each clause's label -> probability
    (``classify_clauses``, or ``read_in_context``), then ``resolve_clauses``."""
    if spec is None or scores is None:
        return resolve_clauses(primaries, spec, scores, [], [])
    split = clauses_of_batch(spec, texts, primaries, scores, threshold)
    return resolve_clauses(primaries, spec, scores, split, read(split), threshold)


def resolve_clauses(
    primaries: Sequence[str],
    spec,
    scores: np.ndarray | None,
    split: Sequence[Sequence[str]],
    clause_probs: Sequence[Sequence[Mapping[str, float]]],
    threshold: float | None = None,
) -> tuple[list[list[str]], list[list[dict]]]:
    """Intents of many messages (``resolve_intents``) from their top labels ``primaries``, one-vs-rest
    ``scores``, clauses to read ``split`` (``clauses_of_batch``) and those clauses' label -> probability
    ``clause_probs``. Without a compound head (``spec`` or ``scores`` None) each message has its primary
    alone, and the clauses are not looked at. Returns the intents and, per message, its clauses with their
    top label and probability (for the trace; [] when none were read)."""
    if spec is None or scores is None:
        return [[] if p in RESERVED else [p] for p in primaries], [[] for _ in primaries]
    intents, details = [], []
    score_rows = np.asarray(scores, dtype=np.float64).tolist()  # plain floats, converted once
    for i, (clauses, rows) in enumerate(zip(split, clause_probs, strict=True)):
        row_scores = dict(zip(spec.intents, score_rows[i], strict=True))
        intents.append(resolve_intents(primaries[i], spec, row_scores, rows, threshold))
        details.append(
            [
                {"text": c, "label": max(r, key=r.get), "probability": round(max(r.values()), 6)}
                for c, r in zip(clauses, rows, strict=True)
            ]
        )
    return intents, details


def clauses_of_batch(
    spec,
    texts: Sequence[str],
    primaries: Sequence[str],
    scores: np.ndarray | Sequence[Sequence[float]],
    threshold: float | None = None,
) -> list[list[str]]:
    """Each message's clauses to read (``clauses_to_read``, at ``clause_floor``): the one place that
    decides whose clauses are classified."""
    floor = clause_floor(spec, threshold)
    return [
        clauses_to_read(spec, t, p, row, floor) for t, p, row in zip(texts, primaries, scores, strict=True)
    ]


def clauses_to_read(
    spec, text: str, primary: str, scores: np.ndarray | Sequence[float], floor: float
) -> list[str]:
    """The clauses of a message whose clauses could change its intents, else []: the primary is an intent
    and another intent's one-vs-rest score reaches ``floor`` (``clause_floor``)."""
    if primary in RESERVED or _other_max(spec, scores, primary) < floor:
        return []
    return split_clauses(text)


def clause_token_masks(text: str, clauses: Sequence[str], offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    """(clauses, tokens) bool: which tokens of ``text`` each clause covers, by the tokens' character spans
    ``offsets`` ((0, 0) for special tokens). A clause cut off by truncation covers none."""
    off = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)
    real = off[:, 1] > off[:, 0]
    out = np.zeros((len(clauses), len(off)), dtype=bool)
    pos = 0
    for j, clause in enumerate(clauses):
        start = text.find(clause, pos)
        if start < 0:  # split_clauses returns pieces of the text; a caller's clause may differ in case
            start = text.lower().find(clause.lower(), pos)
        if start < 0:
            raise ValueError(f"clause {clause!r} is not in the message {text!r}")
        end = pos = start + len(clause)
        out[j] = real & (off[:, 0] >= start) & (off[:, 1] <= end)
    return out


def clause_vectors(
    text: str, clauses: Sequence[str], offsets: Sequence[tuple[int, int]], states: np.ndarray
) -> np.ndarray:
    """(clauses, width): the mean of each clause's token states inside the whole message, L2-normalised.
    ``states`` are the rows of the graph's token states that match ``offsets``. A clause whose tokens were
    cut off by truncation gets zeros (the head then gives it its prior)."""
    states = np.asarray(states, dtype=np.float32)  # no copy when they are float32 already
    inside = clause_token_masks(text, clauses, offsets).astype(np.float32)
    # every clause's mean in one product (a clause's mask weighs its own tokens), not one gather per clause
    out = inside @ states / np.maximum(inside.sum(axis=1, keepdims=True), 1.0)
    norms = np.sqrt(np.einsum("ij,ij->i", out, out))[:, None]
    return np.divide(out, norms, out=out, where=norms > 0)


def read_in_context(
    vectors: Sequence[np.ndarray], coef: np.ndarray, intercept: np.ndarray, labels: Sequence[str]
) -> list[list[dict[str, float]]]:
    """Each message's clause vectors (``clause_vectors``) through the clause head: softmax(v W^T + b)."""
    sizes = [len(v) for v in vectors]
    if not sum(sizes):
        return [[] for _ in vectors]
    z = np.concatenate([v for v in vectors if len(v)]).astype(np.float64) @ np.asarray(coef, np.float64).T
    z += np.asarray(intercept, np.float64)
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    out, j = [], 0
    for n in sizes:
        out.append([dict(zip(labels, map(float, p[j + k]), strict=True)) for k in range(n)])
        j += n
    return out


def clause_floor(spec, threshold: float | None = None) -> float:
    """The one-vs-rest score under which no intent can be added whatever a message's clauses say:
    ``stacked_scores`` with the best clause terms (probability 1, has clauses) stays below the threshold.
    A message whose other intents all score under it keeps its primary alone, so clauses_of_batch gives
    it no clauses to classify; the intents are the same, only the second graph run is saved (half of the
    test split's single-intent messages that split into clauses)."""
    w, t = spec.weights, spec.threshold if threshold is None else threshold
    return _crossing(spec, t, max(w[1], 0.0), max(w[2], 0.0))


def whole_floor(spec, threshold: float | None = None) -> float:
    """The one-vs-rest score under which a message without clauses keeps its primary alone: there,
    ``stacked_scores`` is sigmoid(w0 * logit(score) + bias), and another intent needs it to reach
    max(threshold, whole_threshold). The bound sits a hair (a relative 1e-9) under the exact crossing, far
    above rounding, so ``resolve_intents`` skips the stacked scores only where they could not add an
    intent. 0.0 (no message is under it) when the stacker does not rise with the score or the target is
    not inside (0, 1)."""
    target = max(spec.threshold if threshold is None else threshold, spec.whole_threshold)
    if not 0.0 < target < 1.0:
        return 0.0
    return _crossing(spec, target) * (1 - 1e-9)


def _crossing(spec, target: float, *clause_terms: float) -> float:
    """The one-vs-rest score at which ``stacked_scores`` reaches ``target`` when its clause terms add
    ``clause_terms`` (subtracted one by one, in order, so the floors round as they always have); 0.0 for a
    stacker that does not rise with the score (no bound: nothing is under it)."""
    w = spec.weights
    if w[0] <= 0:
        return 0.0
    z = math.log(target / (1 - target)) - spec.bias
    for term in clause_terms:
        z -= term
    return 1.0 / (1.0 + math.exp(-(z / w[0])))


def _clip(q) -> float:
    """A one-vs-rest score as ``stacked_scores`` takes it, inside [1e-6, 1 - 1e-6]."""
    return min(max(float(q), 1e-6), 1 - 1e-6)


def _other_max(spec, row: np.ndarray | Sequence[float], primary: str) -> float:
    return max((float(s) for k, s in zip(spec.intents, row, strict=True) if k != primary), default=0.0)


def compound_confidence(
    probs: Mapping[str, float], intents: Sequence[str], clauses: Sequence[Mapping] = ()
) -> float:
    """How sure the model is of ``intents``: the whole message's probability mass on them or, when each
    of two intents is the top label of one of the message's clauses (``resolve_clauses``'s details), the
    lower of those clauses' probabilities, whichever is higher. A compound message's own softmax spreads
    over its asks (measured: its top label is the primary for about a third of them), while each clause
    is read on its own, as a message, by the calibrated model."""
    whole = sum(float(probs.get(i, 0.0)) for i in intents)
    if len(intents) < 2:
        return whole
    best = best_by_label({c["label"]: c["probability"]} for c in clauses)
    if all(i in best for i in intents):
        return max(whole, min(best[i] for i in intents))
    return whole


def merge_skills(specs: Sequence) -> tuple[list[str], list[str], int]:
    """(required, optional, context budget) of several intents' skill specs (router.config.IntentSkills).

    Skills are the union, a skill required by any intent required. The budget starts from the largest
    intent's and adds the budget of each other intent that brings a required skill not loaded yet: the
    SEARCH + REASONING fallback costs REASONING's budget (its skills include retrieval), SEARCH + ACTION
    costs both."""
    required = _unique(s for spec in specs for s in spec.required)
    optional = _unique(s for spec in specs for s in spec.optional if s not in required)
    budget, loaded = 0, set()
    for spec in sorted(specs, key=lambda sp: -sp.context_budget):
        if not budget or not set(spec.required) <= loaded:
            budget += spec.context_budget
        loaded.update(spec.required)
    return required, optional, budget


def _unique(items) -> list[str]:
    out: list[str] = []
    for x in items:
        if x not in out:
            out.append(x)
    return out
