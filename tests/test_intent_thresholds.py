"""Thresholds per intent: fitted for a target precision of accepted messages, and applied by the router."""

from __future__ import annotations

import numpy as np
import pytest

from eval.metrics.intent_thresholds import acceptance, fit_intent_thresholds
from router.config import RouterConfig
from router.routing import Router
from tests.conftest import SHIPPED

LABELS = ["A", "B", "OUT_OF_SCOPE"]


def test_each_intent_gets_the_lowest_threshold_that_reaches_the_target():
    # A: right at 0.9 (x6), wrong at 0.6 (x2); B: right at any confidence (x6)
    probs = np.array([[0.9, 0.05, 0.05]] * 6 + [[0.6, 0.2, 0.2]] * 2 + [[0.2, 0.7, 0.1]] * 6)
    y = np.array([0] * 6 + [2] * 2 + [1] * 6)
    fit = fit_intent_thresholds(probs, y, LABELS, tau=0.75, target=0.95)
    a, b = fit["per_intent"]["A"], fit["per_intent"]["B"]
    assert a["threshold"] == 0.61 and a["reached"] and a["after"]["precision"] == 1.0
    assert a["before"] == acceptance(probs, y, 0, 0.75) and a["before"]["coverage"] == 0.75
    assert b["threshold"] == 0.3 and b["after"]["coverage"] == 1.0 and b["before"]["coverage"] == 0.0
    assert "OUT_OF_SCOPE" not in fit["per_intent"]


def test_an_unreachable_target_takes_the_top_of_the_grid_and_says_so():
    probs = np.array([[0.99, 0.005, 0.005]] * 5 + [[0.99, 0.005, 0.005]] * 5)
    y = np.array([0] * 5 + [1] * 5)  # half of A's confident messages are B
    a = fit_intent_thresholds(probs, y, LABELS, tau=0.75, target=0.9)["per_intent"]["A"]
    assert a["threshold"] == 0.99 and not a["reached"]
    with pytest.raises(ValueError, match="target precision"):
        fit_intent_thresholds(probs, y, LABELS, tau=0.75, target=1.5)


def test_the_router_applies_an_intents_own_threshold():
    text = "restart the indexing service in us-east"
    base = Router.load(SHIPPED)
    d = base.route(text, role="admin")
    assert d.intent == "ACTION" and d.threshold == 0.75 and d.confidence < 1.0
    above = round((d.confidence + 1.0) / 2, 9)  # ACTION's own threshold, above the model's confidence
    config = RouterConfig.load()
    config.thresholds = {"ACTION": above}
    strict = Router.load(SHIPPED, config=config)
    d = strict.route(text, role="admin")
    assert d.intent is None and d.reason_code.value == "no_verifier"
    assert [s.detail for s in d.trace if s.stage == "threshold"] == [{"threshold": above}]
    assert strict.route("where is the travel policy", role="admin").threshold == 0.75  # SEARCH: the global
    assert Router.load(SHIPPED, config=config, threshold=0.75).route(text, role="admin").intent == "ACTION"


def test_thresholds_must_name_configured_intents():
    text = RouterConfig.load().model_dump_json()
    import json

    data = json.loads(text)
    data["thresholds"] = {"WEATHER": 0.9}
    with pytest.raises(ValueError, match="thresholds must name configured intents"):
        RouterConfig.model_validate(data)
    data["thresholds"] = {"ACTION": 1.5}
    with pytest.raises(ValueError, match="threshold must be in"):
        RouterConfig.model_validate(data)
