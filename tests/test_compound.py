"""Compound requests: the second-intent rule, merged skills, the compound head in training, the graph
and the router."""

import json

import numpy as np
import pytest

from router.compound import merge_skills, ordered_intents, secondary_intent
from router.config import RouterConfig
from router.manifest import ModelError, load_manifest
from router.routing import Router

CONFIG = RouterConfig.load()


# ------------------------------------------------------------------------------------ the rule
def test_secondary_is_the_best_other_intent_at_or_above_the_threshold():
    scores = {"ACTION": 0.97, "SEARCH": 0.62, "MEMORY": 0.40, "PLANNING": 0.1, "REASONING": 0.05}
    assert secondary_intent("ACTION", scores, 0.5) == "SEARCH"
    assert secondary_intent("ACTION", scores, 0.62) == "SEARCH"
    assert secondary_intent("ACTION", scores, 0.63) is None
    assert secondary_intent("SEARCH", scores, 0.5) == "ACTION"  # never the primary itself


def test_no_secondary_without_an_intent_scores_or_threshold():
    scores = {"ACTION": 0.9, "SEARCH": 0.9}
    assert secondary_intent("OUT_OF_SCOPE", scores, 0.1) is None
    assert secondary_intent(None, scores, 0.1) is None
    assert secondary_intent("ACTION", None, 0.1) is None
    assert secondary_intent("ACTION", scores, None) is None
    assert secondary_intent("ACTION", {"OUT_OF_SCOPE": 0.99}, 0.1) is None


def test_ordered_intents():
    assert ordered_intents("ACTION", "SEARCH") == ["ACTION", "SEARCH"]
    assert ordered_intents("ACTION", "ACTION") == ["ACTION"]
    assert ordered_intents("ACTION", None) == ["ACTION"]
    assert ordered_intents(None, "SEARCH") == []


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


# ------------------------------------------------------------------------- head, graph, router
@pytest.fixture(scope="module")
def compound_router(tiny_exported):
    model_dir, _ = tiny_exported
    r = Router.load(model_dir, threshold=0.05)
    r.classifier.distance_threshold = None  # the tiny model's distance is fitted on ten rows
    return r


def test_training_fits_the_compound_head_and_records_it(tiny_trained, tiny_exported):
    _, trained = tiny_trained
    assert trained.compound is not None
    assert sorted(trained.compound.intents) == ["ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"]
    assert 0 < trained.compound.threshold < 1 and trained.compound.max_single_compound == 0.01
    assert trained.training["data"]["rows"]["compound_train"] == 16
    model_dir, exported = tiny_exported
    for name, variant in exported.export.variants.items():
        assert variant.parity.intents_agreement is not None, name
        assert variant.parity.max_abs_score_diff is not None, name
    assert exported.export.variants["fp32"].parity.max_abs_score_diff < 1e-4


def test_graph_scores_equal_the_pytorch_head(tiny_trained, tiny_exported):
    from router.classifier import Classifier
    from training.model import IntentModel

    src, _ = tiny_trained
    model_dir, manifest = tiny_exported
    torch_model = IntentModel.load(src / "checkpoint", manifest=manifest)
    texts = ["find the Q3 deck and email it to Maria", "hello", "why did churn go up"]
    _, _, ref = torch_model.predict_compound(texts)
    _, _, ours = Classifier(model_dir, variant="fp32").predict_compound(texts)
    assert ours.shape == (3, 5)
    np.testing.assert_allclose(ours, ref, atol=1e-4)


def test_a_compound_decision_loads_both_intents_skills(compound_router):
    r = compound_router
    r.classifier.compound_threshold = 1e-6  # every confident message gets its best other intent
    try:
        d = r.route("find the onboarding deck and send it to Maria", role="admin")
    finally:
        r.classifier.compound_threshold = r.classifier.manifest.compound.threshold
    assert d.intent is not None and len(d.intents) == 2 and d.intents[0] == d.intent
    specs = [CONFIG.intents[i.value] for i in d.intents]
    required, optional, budget = merge_skills(specs)
    assert d.skills.required == required and d.skills.optional == optional
    assert d.context_budget == budget
    step = next(s for s in d.trace if s.stage == "compound")
    assert step.status == "two_intents" and step.detail["secondary"] == d.intents[1].value
    assert set(step.detail["scores"]) == {"ACTION", "MEMORY", "PLANNING", "REASONING", "SEARCH"}
    assert d.brief()["intent"] == "+".join(i.value for i in d.intents)


def test_a_denied_skill_of_either_intent_makes_it_unservable(compound_router):
    r = compound_router
    r.classifier.compound_threshold = 1e-6
    try:
        for text in ("find the onboarding deck and send it to Maria", "run the nightly export job now"):
            d = r.route(text, role="viewer")
            if len(d.intents) == 2 and "action" in CONFIG.intents[d.intents[0].value].required + (
                CONFIG.intents[d.intents[1].value].required
            ):
                break
        else:
            pytest.skip("the tiny model gave no compound decision with an ACTION intent")
    finally:
        r.classifier.compound_threshold = r.classifier.manifest.compound.threshold
    assert not d.servable and any(x.skill == "action" and x.required for x in d.denied)


def test_single_intent_with_a_high_threshold(compound_router):
    r = compound_router
    r.classifier.compound_threshold = 0.999999
    try:
        d = r.route("run the nightly export job now", role="admin")
    finally:
        r.classifier.compound_threshold = r.classifier.manifest.compound.threshold
    assert d.intents == [d.intent]
    assert next(s for s in d.trace if s.stage == "compound").status == "single"


def test_follow_up_keeps_both_previous_intents(compound_router, tiny_exported):
    model_dir, _ = tiny_exported
    r = compound_router
    r.classifier.compound_threshold = 1e-6
    try:
        first = r.route("find the onboarding deck and send it to Maria", role="admin")
    finally:
        r.classifier.compound_threshold = r.classifier.manifest.compound.threshold
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


def test_without_intent_scores_every_decision_has_one_intent(model_copy):
    """As with an export from before compound requests: no intent scores, no compound step."""
    m = load_manifest(model_copy)
    assert m.compound is not None
    r = Router.load(model_copy, threshold=0.05)
    r.classifier.compound_intents, r.classifier.compound_threshold = [], None
    r.classifier.distance_threshold = None
    d = r.route("find the onboarding deck and send it to Maria", role="admin")
    assert d.intents == [d.intent] and not any(s.stage == "compound" for s in d.trace)
