"""Intents defined by examples in the router config: served by similarity in the model's own embedding
space, with a threshold fitted against the model's reference sample, and no retraining."""

from __future__ import annotations

import json

import numpy as np
import pytest

from router.config import RouterConfig
from router.examples import MIN_EXAMPLES, REFERENCE_QUANTILE, fit_example_intent
from router.routing import Router
from tests.conftest import ROOT, SHIPPED

TRANSLATE = [
    "translate this paragraph into German please",
    "how do you say 'see you tomorrow' in Japanese",
    "can you put the release notes into French for the Lyon office",
    "translate the error message to english, it's in portuguese",
    "what's 'invoice overdue' in Spanish",
    "give me the Italian version of this sentence: the meeting moved to 3pm",
]


def with_translate(examples=TRANSLATE, **extra) -> RouterConfig:
    """The shipped config plus TRANSLATE, an intent the shipped model does not predict."""
    data = json.loads(RouterConfig.load().model_dump_json())
    data["intents"]["TRANSLATE"] = {
        "description": "The user wants text translated from one language into another.",
        "required": ["synthesis"],
        "context_budget": 1000,
        "examples": list(examples),
        **extra,
    }
    return RouterConfig.model_validate(data)


def test_the_threshold_keeps_the_reference_sample_out_and_coverage_counts_the_examples():
    rng = np.random.default_rng(0)
    reference = rng.normal(size=(200, 16))
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    centre = rng.normal(size=16)
    examples = centre + 0.3 * rng.normal(size=(6, 16))
    intent = fit_example_intent("X", examples, reference)

    def unit(x):
        x = x - reference.mean(axis=0)  # the centre every embedding is read against
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    above = ((unit(reference) @ unit(examples).T).max(axis=1) >= intent.threshold).mean()
    assert above <= 1 - REFERENCE_QUANTILE + 1 / len(reference)
    assert intent.coverage == 1.0 and intent.threshold == intent.fitted  # the examples sit together
    strict = fit_example_intent("X", examples, reference, override=0.9999)
    assert strict.threshold == 0.9999 and strict.coverage == 0.0 and strict.fitted == intent.fitted


@pytest.fixture(scope="module")
def router():
    return Router.load(SHIPPED, config=with_translate())


def test_an_intent_defined_by_examples_routes_without_retraining(router):
    assert router.intents[-1] == "TRANSLATE" and "TRANSLATE" not in router.classifier.labels
    d = router.route("please translate this paragraph into Dutch", role="admin")
    assert (d.intent, d.source, d.reason_code.value) == ("TRANSLATE", "examples", "matched_examples")
    (matched,) = [s for s in d.trace if s.stage == "examples"]
    assert matched.detail["similarity"] >= matched.detail["threshold"] == pytest.approx(d.threshold, abs=1e-6)
    assert d.skills.required == ["synthesis"] and [r.intent for r in d.ranking] != []
    assert "TRANSLATE" not in {r.intent for r in d.ranking}  # the ranking is the model's


def test_other_messages_keep_the_models_decision(router):
    plain = Router.load(SHIPPED)
    for text in (
        "restart the indexing service in us-east",
        "thanks, that's all!",
        "where is the travel policy",
    ):
        a, b = router.route(text, role="admin"), plain.route(text, role="admin")
        assert (a.intent, a.source, a.reason_code, a.confidence) == (
            b.intent,
            b.source,
            b.reason_code,
            b.confidence,
        )


def test_fewer_than_the_minimum_of_examples_is_refused():
    with pytest.raises(ValueError, match=f"needs at least {MIN_EXAMPLES} examples"):
        Router.load(SHIPPED, config=with_translate(TRANSLATE[:3]))


def test_a_config_threshold_overrides_the_fitted_one():
    router = Router.load(SHIPPED, config=with_translate(), threshold=0.9)
    fitted = router.examples.intents["TRANSLATE"]
    assert router.thresholds["TRANSLATE"] == fitted.fitted  # the caller's 0.9 is the classifier's
    config = with_translate()
    config.thresholds = {"TRANSLATE": 0.9999}
    strict = Router.load(SHIPPED, config=config)
    d = strict.route("please translate this paragraph into Dutch", role="admin")
    assert d.source != "examples" and strict.examples.summary()["TRANSLATE"]["threshold"] == 0.9999


def test_the_verifier_is_told_the_intent_defined_by_examples():
    from router.verifier import LLMVerifier, VerifierSettings

    config = with_translate()
    verifier = LLMVerifier(VerifierSettings(base_url="http://127.0.0.1:9/v1", model="m"), config)
    try:
        assert verifier.intents == (*RouterConfig.load().intents, "TRANSLATE")
        assert "- TRANSLATE: The user wants text translated" in verifier.system_prompt
        assert "- SEARCH: The user wants something located" in verifier.system_prompt  # the shipped file's
        Router.load(SHIPPED, config=config, verifier=verifier)  # the same intents: accepted
    finally:
        verifier.close()


def test_the_next_build_trains_it_as_a_class(tmp_path):
    from eval.readers.loader import load_labeled
    from training.fit.train import _with_example_intents

    config = tmp_path / "router.yaml"
    import yaml

    config.write_text(yaml.safe_dump(json.loads(with_translate().model_dump_json())))
    rows = _with_example_intents(load_labeled(ROOT / "data" / "dev.jsonl"), config, print)
    added = [t for t, label in zip(rows.texts, rows.labels, strict=True) if label == "TRANSLATE"]
    assert added == TRANSLATE
