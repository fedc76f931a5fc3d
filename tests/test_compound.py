"""Compound requests: the second-intent rule, merged skills, the compound head in training, the graph
and the router."""

import json
from contextlib import contextmanager

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
from router.manifest import Compound, ModelError, load_manifest
from router.routing import Router
from tests.conftest import ROOT

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


# ----------------------------------------------------------------------------------- clauses
def test_clauses_split_at_conjunctions_and_sentence_ends():
    assert split_clauses("find the Q3 board deck and email it to Maria") == [
        "find the Q3 board deck",
        "email it to Maria",
    ]
    assert split_clauses("which listing did I pick? pull the packet for it") == [
        "which listing did I pick",
        "pull the packet for it",
    ]
    assert split_clauses("find and list the contracts") == []  # "find" alone is not a clause
    assert split_clauses("hi, where is the travel policy") == []
    assert split_clauses("a b, c d, e f, g h, i j, k l, m n") == ["a b", "c d", "e f", "g h", "i j", "k l"]


def test_clauses_split_at_shorthand_joiners_and_subordinate_asks():
    assert split_clauses("recap our chat pls + find the latest sprint review deck") == [
        "recap our chat pls",
        "find the latest sprint review deck",
    ]
    assert split_clauses("churn interview notes -> synthesize themes") == [
        "churn interview notes",
        "synthesize themes",
    ]
    assert split_clauses("forward Ingrid the terms once you've found them in the sales folder") == [
        "forward Ingrid the terms",
        "you've found them in the sales folder",
    ]
    # "if so" / "if not" join two asks and are not a clause of their own
    assert split_clauses("is the copy compliant? if it is, schedule the post for 9am") == [
        "is the copy compliant",
        "schedule the post for 9am",
    ]
    # "before" / "after" without a subject is part of the ask, not a boundary
    assert split_clauses("plan corrective actions before the re-inspection") == []


def test_clauses_keep_one_object_and_purpose_together():
    # "and" / a comma before a determiner, preposition, number or name joins parts of one object
    assert split_clauses("walk me through how credit is split between a webinar and an SDR call") == []
    assert split_clauses("create an account for our new hire, Aisha Khan, in Okta and Google Workspace") == []
    assert split_clauses("pull the Q3 and Q4 decks, then compare them") == [
        "pull the Q3 and Q4 decks",
        "compare them",
    ]
    assert split_clauses("find the contract, the invoice and the PO and send them to legal") == [
        "find the contract, the invoice and the PO",
        "send them to legal",
    ]
    # ... but "I" opens a clause
    assert split_clauses("find the deck and I'll review it") == ["find the deck", "I'll review it"]
    # "so" states a purpose, not a second ask
    assert split_clauses("create an offboarding checklist so access gets fully revoked") == []
    assert split_clauses("list my preferences back so I can paste them into the guidelines") == []


def test_the_split_lookahead_only_skips_positions_no_joiner_can_start_at():
    # the fast pattern must split exactly as its alternatives alone: on every message of the corpus, and
    # on random strings made of the joiners' pieces, punctuation, names and non-ASCII word characters
    import random
    import re

    from router import clauses

    plain = re.compile(clauses._ALTERNATIVES, re.IGNORECASE)
    rows = [
        json.loads(line)
        for path in sorted((ROOT / "data").rglob("*.jsonl"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    ]
    texts = [t["text"] for row in rows for t in row.get("turns", [row])]  # conversations: every turn
    assert len(texts) > 5000
    rng = random.Random(0)
    pieces = [*clauses._JOINERS, *clauses._SUBJECT_JOINERS, *"ab ,;?!.+&->=ItTAPOBifné_1\u00a0"]
    pieces += [" you", " we", "Maria", " the", "I"]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 12))) for _ in range(20000)]
    assert [t for t in texts if clauses._SPLIT.split(t) != plain.split(t)] == []


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
    from eval.compound import route_rows

    labels = ["ACTION", "MEMORY", "OUT_OF_SCOPE", "PLANNING", "REASONING", "SEARCH"]
    probs = np.array([[0.15, 0.0, 0.0, 0.5, 0.3, 0.05]])
    spread = route_rows(probs, labels, 0.75, intents=[["ACTION", "REASONING"]], config=CONFIG)
    sure = route_rows(
        probs,
        labels,
        0.75,
        intents=[["ACTION", "REASONING"]],
        pair_confidence=np.array([0.81]),
        config=CONFIG,
    )
    assert spread.status == ["fallback"] and sure.status == ["accepted"]
    assert {"action", "synthesis"} <= set(sure.skills[0]) and "action" not in spread.skills[0]


# ------------------------------------------------------------------------- head, graph, router
@pytest.fixture(scope="module")
def compound_router(tiny_exported):
    model_dir, _ = tiny_exported
    r = Router.load(model_dir, threshold=0.05)
    r.classifier.distance_threshold = None  # the tiny model's distance is fitted on ten rows
    return r


@contextmanager
def eager(router):
    """Lower the compound thresholds so that the tiny model's confident messages get a second intent."""
    spec = router.classifier.manifest.compound
    router.classifier.manifest.compound = spec.model_copy(update={"threshold": 1e-4, "whole_threshold": 1e-4})
    try:
        yield
    finally:
        router.classifier.manifest.compound = spec


def test_training_fits_the_compound_head_and_records_it(tiny_trained, tiny_exported):
    _, trained = tiny_trained
    c = trained.compound
    assert c is not None and c.method == "clauses+one-vs-rest"
    assert sorted(c.intents) == ["ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"]
    assert 0 < c.threshold < 1 and c.whole_threshold >= c.threshold and c.max_single_compound == 0.015
    assert c.primary_order["ACTION+SEARCH"] == "ACTION"  # 3 of 3 tiny training pairs
    assert list(c.primary_order) == sorted(c.primary_order)  # not the order of a set, which varies per run
    assert trained.training["data"]["rows"]["compound_train"] == 16
    _, exported = tiny_exported
    for name, variant in exported.export.variants.items():
        assert variant.parity.intents_agreement is not None, name
        assert variant.parity.max_abs_score_diff is not None, name
    assert exported.export.variants["fp32"].parity.max_abs_score_diff < 1e-4
    assert exported.export.variants["fp32"].parity.intents_agreement == 1.0


def test_graph_scores_and_intents_equal_the_pytorch_side(tiny_trained, tiny_exported):
    from router.classifier import Classifier
    from training.intent_model import IntentModel

    src, _ = tiny_trained
    model_dir, manifest = tiny_exported
    torch_model = IntentModel.load(src / "checkpoint", manifest=manifest)
    texts = [
        "find the Q3 deck and email it to Maria",
        "hello",
        "why did churn go up",
        "run the export, then notify ops",
    ]
    _, _, ref, ref_intents, _ = torch_model.predict_compound(texts)
    _, _, ours, intents, _ = Classifier(model_dir, variant="fp32").predict_compound(texts)
    assert ours.shape == (4, 5)
    np.testing.assert_allclose(ours, ref, atol=1e-4)
    assert intents == ref_intents


def test_a_compound_decision_loads_both_intents_skills(compound_router):
    r = compound_router
    with eager(r):
        d = r.route("find the onboarding deck and send it to Maria", role="admin")
    assert d.intent is not None and len(d.intents) == 2 and d.intents[0] == d.intent
    specs = [CONFIG.intents[i] for i in d.intents]
    required, optional, budget = merge_skills(specs)
    assert d.skills.required == required and d.skills.optional == optional
    assert d.context_budget == budget
    step = next(s for s in d.trace if s.stage == "compound")
    assert step.status == "two_intents" and step.detail["intents"] == list(d.intents)
    assert [c["text"] for c in step.detail["clauses"]] == ["find the onboarding deck", "send it to Maria"]
    assert set(step.detail["scores"]) == {"ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"}
    assert d.brief()["intent"] == "+".join(d.intents)


def test_a_denied_skill_of_either_intent_makes_it_unservable(compound_router):
    r = compound_router
    with eager(r):
        for text in ("find the onboarding deck and send it to Maria", "run the nightly export job now"):
            d = r.route(text, role="viewer")
            needed = {s for i in d.intents for s in CONFIG.intents[i].required}
            if len(d.intents) == 2 and "action" in needed:
                break
        else:
            pytest.skip("the tiny model gave no compound decision with an ACTION intent")
    assert not d.servable and any(x.skill == "action" and x.required for x in d.denied)


def test_single_intent_with_the_fitted_thresholds(compound_router):
    d = compound_router.route("run the nightly export job now", role="admin")
    assert d.intents == [d.intent]
    assert next(s for s in d.trace if s.stage == "compound").status == "single"


def test_follow_up_keeps_both_previous_intents(compound_router, tiny_exported):
    model_dir, _ = tiny_exported
    with eager(compound_router):
        first = compound_router.route("find the onboarding deck and send it to Maria", role="admin")
    assert len(first.intents) == 2
    strict = Router.load(model_dir, threshold=1.0)  # unsure about everything: the follow-up path
    strict.classifier.distance_threshold = None
    d = strict.route("and for next week?", role="admin", previous=first)
    assert d.reason_code.value == "follow_up_unverified"
    assert d.intents == first.intents


def test_a_manifest_compound_threshold_unlike_the_graph_is_refused(model_copy):
    path = model_copy / "manifest.json"
    data = json.loads(path.read_text())
    data["compound"]["threshold"] = 0.123
    path.write_text(json.dumps(data))
    with pytest.raises(ModelError, match="compound"):
        Router.load(model_copy)


def test_without_a_compound_section_every_decision_has_one_intent(model_copy):
    """As with an export from before compound requests: no intents beyond the primary, no compound step."""
    m = load_manifest(model_copy)
    assert m.compound is not None
    r = Router.load(model_copy, threshold=0.05)
    r.classifier.manifest.compound, r.classifier.distance_threshold = None, None
    d = r.route("find the onboarding deck and send it to Maria", role="admin")
    assert d.intents == [d.intent]


def test_the_verifier_can_route_two_intents(tiny_exported, openai_server, make_verifier):
    """Below the threshold, an LLM verifier (real HTTP) that answers two intents gets both skills."""
    from tests.conftest import below_threshold

    model_dir, _ = tiny_exported
    r = Router.load(model_dir, threshold=1.0, verifier=make_verifier(openai_server))
    r.classifier.distance_threshold = None
    openai_server.push(
        json.dumps({"intent": "ACTION", "secondary_intent": "SEARCH", "reason_code": "fresh_request"})
    )
    d = r.route(below_threshold(r), role="admin")
    assert (d.source, d.reason_code.value) == ("verifier", "verified")
    assert list(d.intents) == ["ACTION", "SEARCH"] and d.intent == "ACTION"
    required, optional, budget = merge_skills([CONFIG.intents["ACTION"], CONFIG.intents["SEARCH"]])
    assert (d.skills.required, d.skills.optional, d.context_budget) == (required, optional, budget)
    assert next(s for s in d.trace if s.stage == "verifier").detail["secondary"] == "SEARCH"
    assert d.requires_confirmation  # ACTION's confirmation is kept


# ------------------------------------------------------------------ the cases (shipped model)
@pytest.mark.parametrize(
    "text, intents, required",
    [
        ("find the Q3 board deck and email it to Maria", ["ACTION", "SEARCH"], {"action", "retrieval"}),
        (
            "summarize our discussion so far and create a ticket for the follow-ups",
            ["ACTION", "MEMORY"],
            {"action", "memory"},
        ),
        (
            "compare the two vendor proposals and then book a call with the cheaper one",
            ["ACTION", "REASONING"],
            {"action", "retrieval", "synthesis"},
        ),
    ],
)
def test_shipped_model_loads_both_intents_skills(shipped_router, text, intents, required):
    d = shipped_router.route(text, role="admin")
    assert list(d.intents) == intents and d.source == "classifier"
    assert set(d.skills.required) == required and d.requires_confirmation and d.servable
    viewer = shipped_router.route(text, role="viewer")
    assert not viewer.servable and "action" in {x.skill for x in viewer.denied if x.required}


def test_shipped_model_keeps_a_twin_single(shipped_router):
    d = shipped_router.route("find and list the board decks from 2023", role="admin")
    assert list(d.intents) == ["SEARCH"]
