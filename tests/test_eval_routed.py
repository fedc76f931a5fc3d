"""`intent-router eval` counts what route() does: with per-intent thresholds in the router config, every
routed figure of the report equals the count from calling route() on the same messages."""

from __future__ import annotations

import json

import pytest

from eval.metrics.conversation_turns import evaluate_conversations
from eval.metrics.evaluator import run_evaluation
from router.config import RouterConfig
from router.decision import ReasonCode
from router.routing import Router
from tests.conftest import ROOT, SHIPPED

ACCEPTED = {ReasonCode.CONFIDENT, ReasonCode.CONFIDENT_COMPOUND, ReasonCode.MATCHED_EXAMPLES}
THRESHOLDS = {"ACTION": 0.985, "SEARCH": 0.5, "MEMORY": 0.97}


def _rows(path, n):
    """``n`` rows spread over the file (the splits are grouped by label)."""
    lines = (ROOT / path).read_text().splitlines()
    return [json.loads(line) for line in lines[:: max(1, len(lines) // n)][:n]]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    """A slice of each split, a config with its own thresholds, the report, and route() over the same."""
    tmp = tmp_path_factory.mktemp("routed")
    cfg_data = RouterConfig.load().model_dump(mode="json")
    cfg_data["thresholds"] = THRESHOLDS
    (tmp / "router.yaml").write_text(json.dumps(cfg_data))
    files = {
        "data": _write(tmp / "test.jsonl", _rows("data/test.jsonl", 240)),
        "oos": _write(tmp / "oos.jsonl", _rows("data/oos.jsonl", 80)),
        "compound": _write(tmp / "compound.jsonl", _rows("data/compound/test.jsonl", 100)),
        "conversations": _write(tmp / "conv.jsonl", _rows("data/conversations/test.jsonl", 30)),
    }
    report = run_evaluation(SHIPPED, config=tmp / "router.yaml", max_latency_samples=0, **files)
    router = Router.load(SHIPPED, tmp / "router.yaml")
    assert router.thresholds["SEARCH"] == 0.5  # the config's own, not one for all

    def route(name):
        rows = [json.loads(line) for line in files[name].read_text().splitlines()]
        return rows, router.route_batch([r["text"] for r in rows], "admin")

    return report, router, route, files


def _share(flags):
    return round(sum(flags) / len(flags), 6)


def test_in_scope_and_out_of_scope_figures_are_route_s(case):
    report, _, route, _ = case
    rows, decisions = route("data")
    scope = report["scope"]
    inside = [
        d for r, d in zip(rows, decisions, strict=True) if r["label"] not in ("OUT_OF_SCOPE", "CONTINUATION")
    ]
    assert scope["in_scope"]["accepted_share"] == _share([d.reason_code in ACCEPTED for d in inside])
    assert scope["in_scope"]["called_out_of_scope"] == _share(
        [d.reason_code == ReasonCode.OUT_OF_SCOPE for d in inside]
    )
    outside = [d for r, d in zip(rows, decisions, strict=True) if r["label"] == "OUT_OF_SCOPE"]
    assert scope["out_of_scope"]["not_routed"] == _share([d.reason_code not in ACCEPTED for d in outside])
    assert scope["out_of_scope"]["recall"] == _share(
        [d.reason_code == ReasonCode.OUT_OF_SCOPE for d in outside]
    )
    below = [d.reason_code not in ACCEPTED and d.reason_code != ReasonCode.OUT_OF_SCOPE for d in outside]
    assert scope["out_of_scope"]["below_threshold"] == _share(below)
    _, oos = route("oos")
    assert scope["oos_file"]["not_routed"] == _share([d.reason_code not in ACCEPTED for d in oos])
    assert report["oos"]["router_recall"] == scope["oos_file"]["not_routed"]


def test_compound_figures_are_route_s(case):
    report, router, route, _ = case
    rows, decisions = route("compound")
    pairs = [(r, d) for r, d in zip(rows, decisions, strict=True) if len(r.get("labels", [])) > 1]
    c = report["compound"]["compound"]

    def loaded(d):
        return {*d.skills.required, *d.skills.optional, *(x.skill for x in d.denied)}

    needed = [{s for x in r["labels"] for s in router.config.intents[x].required} for r, _ in pairs]
    assert c["skills_of_both_loaded"] == _share(
        [n <= loaded(d) for n, (_, d) in zip(needed, pairs, strict=True)]
    )
    assert c["accepted"] == _share([d.reason_code in ACCEPTED for _, d in pairs])
    assert c["out_of_scope"] == _share([d.reason_code == ReasonCode.OUT_OF_SCOPE for _, d in pairs])
    budget = sum(d.context_budget for d in decisions) / len(decisions)
    assert report["compound"]["skills"]["budget_per_message"] == round(budget, 6)


def test_conversation_figures_are_route_s(case):
    report, router, _, files = case
    routed = evaluate_conversations(router, files["conversations"])
    got = report["conversation"]
    for key in ("social", "continuation", "switch"):
        assert got[key] == routed[key], key


def test_a_threshold_for_all_overrides_the_config_s(case):
    _, _, _, files = case
    one = run_evaluation(SHIPPED, files["data"], config=files["data"].parent / "router.yaml", threshold=0.75,
                         max_latency_samples=0)  # fmt: skip
    plain = run_evaluation(SHIPPED, files["data"], threshold=0.75, max_latency_samples=0)
    assert one["scope"]["in_scope"] == plain["scope"]["in_scope"]
