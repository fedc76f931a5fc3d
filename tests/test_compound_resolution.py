"""Compound requests: the second-intent rule, the clause reading and merged skills, on hand-made scores."""

import numpy as np
import pytest

from router.clauses import split_clauses
from router.compound import (
    classify_clauses,
    clause_floor,
    clause_vectors,
    compound_confidence,
    merge_skills,
    order_pair,
    read_in_context,
    resolve_batch,
    resolve_intents,
    stacked_scores,
    whole_floor,
)
from router.config import RouterConfig
from router.manifest import Compound

CONFIG = RouterConfig.load()
SPEC = Compound(
    intents=["ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"],
    threshold=0.4,
    whole_threshold=0.6,
    clause_min=0.5,
    weights=[1.0, 4.0, 0.5],
    bias=-4.0,
    primary_order={"ACTION+SEARCH": "ACTION", "PLANNING+SEARCH": "PLANNING"},
    max_single_compound=0.01,
)
LOW = {i: 0.02 for i in SPEC.intents}


def _clause(**p):
    return {"OUT_OF_SCOPE": 0.0, **{i: 0.0 for i in SPEC.intents}, **p}


# ------------------------------------------------------------------------------------ the rule
def test_two_clause_intents_confirmed_by_the_stacked_score_make_a_compound_request():
    clauses = [_clause(SEARCH=0.9), _clause(ACTION=0.95)]
    scores = {**LOW, "ACTION": 0.9, "SEARCH": 0.5}
    assert resolve_intents("SEARCH", SPEC, scores, clauses) == ["ACTION", "SEARCH"]  # end goal first
    stacked = stacked_scores(SPEC, scores, {"ACTION": 0.95, "SEARCH": 0.9})
    assert stacked["ACTION"] > 0.4 and stacked["SEARCH"] > 0.4


def test_a_clause_intent_the_stacked_score_does_not_confirm_is_dropped():
    clauses = [_clause(SEARCH=0.9), _clause(ACTION=0.95)]
    scores = {**LOW, "SEARCH": 0.9, "ACTION": 1e-5}  # the whole message shows no sign of an action
    assert stacked_scores(SPEC, scores, {"ACTION": 0.95})["ACTION"] < 0.4
    assert resolve_intents("SEARCH", SPEC, scores, clauses) == ["SEARCH"]
    assert resolve_intents("SEARCH", SPEC, scores, clauses, threshold=1e-7) == ["ACTION", "SEARCH"]


def test_unsure_clauses_and_same_intent_clauses_stay_single():
    scores = {**LOW, "SEARCH": 0.9}
    assert resolve_intents("SEARCH", SPEC, scores, [_clause(SEARCH=0.9), _clause(SEARCH=0.8)]) == ["SEARCH"]
    assert resolve_intents("SEARCH", SPEC, scores, [_clause(SEARCH=0.9), _clause(ACTION=0.45)]) == ["SEARCH"]


def test_the_whole_message_path_adds_a_strong_second_intent():
    scores = {**LOW, "PLANNING": 0.9, "SEARCH": 0.999}
    assert stacked_scores(SPEC, scores, {})["PLANNING"] < 0.6  # no clauses: needs whole_threshold
    assert resolve_intents("SEARCH", SPEC, scores) == ["SEARCH"]
    scores["PLANNING"] = 0.99999
    assert resolve_intents("SEARCH", SPEC, scores) == ["PLANNING", "SEARCH"]


def test_no_intents_out_of_scope_and_one_without_a_compound_head():
    assert resolve_intents("OUT_OF_SCOPE", SPEC, LOW, [_clause(ACTION=0.9), _clause(SEARCH=0.9)]) == []
    assert resolve_intents("ACTION", None, LOW) == ["ACTION"]
    assert resolve_intents("ACTION", SPEC, None) == ["ACTION"]


def test_the_clause_floor_is_where_the_best_clause_can_first_confirm_an_intent():
    floor = clause_floor(SPEC)
    best = {"ACTION": 1.0, "SEARCH": 1.0}  # the clause terms at their maximum
    clauses = [_clause(SEARCH=1.0), _clause(ACTION=1.0)]
    below, above = (
        {**LOW, "SEARCH": 0.9, "ACTION": floor * 0.99},
        {**LOW, "SEARCH": 0.9, "ACTION": floor * 1.01},
    )
    assert (
        stacked_scores(SPEC, below, best)["ACTION"]
        < SPEC.threshold
        <= stacked_scores(SPEC, above, best)["ACTION"]
    )
    assert resolve_intents("SEARCH", SPEC, below, clauses) == ["SEARCH"]
    assert resolve_intents("SEARCH", SPEC, above, clauses) == ["ACTION", "SEARCH"]
    assert clause_floor(SPEC, threshold=0.2) < floor  # a lower threshold lowers the floor


def test_the_whole_floor_skips_the_stacked_scores_only_where_they_could_not_add_an_intent():
    # without clauses resolve_intents answers from a bound on the scores; the full rule must agree with it
    # on both sides of the crossing, for stackers that rise, fall or saturate
    import random

    def full_rule(primary, spec, scores, t):
        stacked = {k: v for k, v in stacked_scores(spec, scores, {}).items() if k != primary}
        k = max(stacked, key=stacked.get)
        if stacked[k] >= max(t, spec.whole_threshold):
            return order_pair(spec, primary, k, primary)
        return [primary]

    rng = random.Random(0)
    specs = [SPEC, SPEC.model_copy(update={"weights": [-0.5, 4.0, 0.5]})]
    specs += [SPEC.model_copy(update={"whole_threshold": 1.0}), SPEC.model_copy(update={"bias": 40.0})]
    specs += [
        SPEC.model_copy(update={"weights": [rng.uniform(0.1, 3), 4.0, 0.5], "bias": rng.uniform(-9, 3)})
    ]
    for spec in specs:
        floor = whole_floor(spec)
        near = [floor * f for f in (0.5, 1 - 1e-6, 1.0, 1 + 1e-12, 1 + 1e-9, 1 + 1e-6, 1.5)]
        for q in [*near, 0.0, 1e-7, 0.3, 0.999999, 1.0, *(rng.random() for _ in range(50))]:
            scores = {**LOW, "SEARCH": 0.9, "ACTION": min(q, 1.0)}
            assert resolve_intents("SEARCH", spec, scores) == full_rule(
                "SEARCH", spec, scores, spec.threshold
            )
    assert whole_floor(specs[1]) == whole_floor(specs[2]) == 0.0  # a falling stacker, a target of 1
    above = stacked_scores(SPEC, {**LOW, "ACTION": whole_floor(SPEC) / (1 - 1e-9)}, {})["ACTION"]
    assert above == pytest.approx(max(SPEC.threshold, SPEC.whole_threshold), abs=1e-9)  # at the crossing


def test_resolve_batch_reads_clauses_only_of_messages_the_floor_lets_through():
    labels = ["ACTION", "MEMORY", "OUT_OF_SCOPE", "PLANNING", "REASONING", "SEARCH"]
    seen: list[str] = []

    def predict(texts):  # each clause reads as the intent its first word names
        seen.extend(texts)
        names = {"find": "SEARCH", "email": "ACTION", "fetch": "SEARCH", "send": "ACTION"}
        return np.array([[float(names[t.split()[0]] == l) for l in labels] for t in texts])

    floor = clause_floor(SPEC)
    texts = ["find the deck and email it to Maria", "fetch the memo and send it to Ana"]
    order = list(SPEC.intents)
    scores = np.full((2, len(order)), 0.001)
    scores[:, order.index("SEARCH")] = 0.9
    scores[0, order.index("ACTION")] = floor * 1.01
    scores[1, order.index("ACTION")] = floor * 0.99
    intents, details = resolve_batch(
        texts, ["SEARCH", "SEARCH"], SPEC, scores, lambda split: classify_clauses(split, labels, predict)
    )
    assert intents == [["ACTION", "SEARCH"], ["SEARCH"]]
    assert seen == split_clauses(texts[0]) and details[1] == []


def test_clause_vectors_pool_each_clauses_own_tokens_inside_the_message():
    text = "find the deck and email it"
    clauses = split_clauses(text)
    assert clauses == ["find the deck", "email it"]
    # [CLS] find the deck and email it [SEP]; token k's state is k in column 0, 1 in column 1
    offsets = [(0, 0), (0, 4), (5, 8), (9, 13), (14, 17), (18, 23), (24, 26), (0, 0)]
    states = np.stack([np.arange(8.0), np.ones(8)], axis=1)
    v = clause_vectors(text, clauses, offsets, states)
    expect = np.array([[2.0, 1.0], [5.5, 1.0]])  # tokens 1-3 and 5-6; "and" and the specials left out
    np.testing.assert_allclose(v, expect / np.linalg.norm(expect, axis=1, keepdims=True), rtol=1e-6)
    # truncation cut the second clause off: zeros, which the head turns into its prior
    v = clause_vectors(text, clauses, [*offsets[:4], (0, 0)], states[:5])
    assert v[1].tolist() == [0.0, 0.0] and v[0].any()
    with pytest.raises(ValueError, match="not in the message"):
        clause_vectors(text, ["send the memo"], offsets, states)


def test_read_in_context_is_a_softmax_head_per_clause():
    coef, intercept = np.array([[1.0, 0.0], [0.0, 1.0]]), np.array([0.0, 0.5])
    out = read_in_context([np.array([[2.0, 0.0]]), np.zeros((0, 2)), np.eye(2)], coef, intercept, ["A", "B"])
    assert [len(m) for m in out] == [1, 0, 2]
    z = np.array([2.0, 0.5])
    assert out[0][0]["A"] == pytest.approx(np.exp(z[0]) / np.exp(z).sum())
    assert out[2][1]["B"] > out[2][0]["B"] and sum(out[2][0].values()) == pytest.approx(1.0)


def test_merged_skills_are_the_union_and_the_budget_counts_new_skills_only():
    i = CONFIG.intents
    required, optional, budget = merge_skills([i["ACTION"], i["SEARCH"]])
    assert required == ["action", "retrieval"] and optional == ["reflection"]
    assert budget == i["ACTION"].context_budget + i["SEARCH"].context_budget
    # the fallback: REASONING's skills include SEARCH's, so SEARCH adds no context
    required, optional, budget = merge_skills([i["SEARCH"], i["REASONING"]])
    assert sorted(required) == ["retrieval", "synthesis"] and optional == ["reflection"]
    assert budget == i["REASONING"].context_budget
    # a skill optional for one intent and required by the other is required
    _, optional, _ = merge_skills([i["MEMORY"], i["ACTION"]])
    assert optional == ["reflection"]
    assert merge_skills([i["PLANNING"]]) == (
        i["PLANNING"].required,
        [s for s in i["PLANNING"].optional],
        i["PLANNING"].context_budget,
    )


def test_compound_confidence_reads_the_clauses_when_the_whole_message_spreads():
    probs = {"PLANNING": 0.5, "REASONING": 0.3, "ACTION": 0.15, "SEARCH": 0.05}
    clauses = [
        {"text": "figure out which plan yields more", "label": "REASONING", "probability": 0.93},
        {"text": "place the order with the coop", "label": "ACTION", "probability": 0.81},
        {"text": "thanks a lot", "label": "OUT_OF_SCOPE", "probability": 0.99},
    ]
    # each intent leads a clause: the weaker clause decides, since it beats the mass on the pair (0.45)
    assert compound_confidence(probs, ["ACTION", "REASONING"], clauses) == pytest.approx(0.81)
    # an intent no clause leads: the whole message's mass on the pair
    assert compound_confidence(probs, ["ACTION", "SEARCH"], clauses) == pytest.approx(0.2)
    # the mass wins when it is higher; a single intent is its own probability
    assert compound_confidence(probs, ["PLANNING", "REASONING"], clauses[:1]) == pytest.approx(0.8)
    assert compound_confidence(probs, ["PLANNING"], clauses) == pytest.approx(0.5)


def test_eval_accepts_a_compound_request_on_its_clauses_as_the_router_does():
    from tests.test_eval_compound import _route

    probs = np.array(
        [[0.15, 0.0, 0.0, 0.5, 0.3, 0.05]]
    )  # ACTION MEMORY OUT_OF_SCOPE PLANNING REASONING SEARCH
    clauses = [
        {"text": "restart it", "label": "ACTION", "probability": 0.9},
        {"text": "and why did it fail", "label": "REASONING", "probability": 0.81},
    ]
    spread = _route(probs, [["ACTION", "REASONING"]], CONFIG)
    sure = _route(probs, [["ACTION", "REASONING"]], CONFIG, clauses=[clauses])
    assert spread.status == ["fallback"] and sure.status == ["accepted"]
    assert {"action", "synthesis"} <= set(sure.skills[0]) and "action" not in spread.skills[0]
