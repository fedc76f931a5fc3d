"""Compound requests: the compound head in training, the graph and the router, on the tiny model and the
shipped ones."""

import json
from contextlib import contextmanager

import numpy as np
import pytest

from router.compound import merge_skills
from router.config import RouterConfig
from router.manifest import ModelError, load_manifest
from router.routing import Router

CONFIG = RouterConfig.load()


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
    from training.fit.intent_model import IntentModel

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
