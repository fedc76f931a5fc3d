"""eval.metrics.two_intent on hand-made arrays, the compound gate checks, the report section and the CLI option."""

import copy
import json

import numpy as np
import pytest

from eval.metrics.evaluator import run_evaluation
from eval.metrics.routed import PredictorClassifier, decide, routed_rows
from eval.metrics.two_intent import compound_metrics, predicted_intents
from eval.reports.gate import DEFAULT_POLICY, gate_passed, gate_rows, make_baseline, run_gate
from eval.reports.report_files import load_schema
from router.config import RouterConfig
from router.routing import Router
from tests.conftest import TINY
from tests.json_schema_check import mini_validate, validate_json
from tests.test_eval import _report

LABELS = ["ACTION", "MEMORY", "OUT_OF_SCOPE", "PLANNING", "REASONING", "SEARCH"]
HEAD = ["SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION"]  # score columns, another order
TAU, CT = 0.75, 0.5


def _probs(**p):
    rest = (1 - sum(p.values())) / (len(LABELS) - len(p))
    return [p.get(l, rest) for l in LABELS]


def _scores(**s):
    return [s.get(i, 0.1) for i in HEAD]


# row: (gold, probabilities, one-vs-rest scores); the comment says what the router does
ROWS = [
    (["ACTION", "SEARCH"], _probs(ACTION=0.9), _scores(ACTION=0.95, SEARCH=0.8)),  # both, accepted
    (["REASONING", "SEARCH"], _probs(SEARCH=0.9), _scores(REASONING=0.7)),  # both, swapped
    (["ACTION", "MEMORY"], _probs(ACTION=0.6), _scores(MEMORY=0.9)),  # both, below tau: fallback
    (["PLANNING", "SEARCH"], _probs(OUT_OF_SCOPE=0.9), _scores(SEARCH=0.9)),  # out of scope
    (["SEARCH"], _probs(SEARCH=0.95), _scores(ACTION=0.6)),  # twin called compound
    (["MEMORY"], _probs(MEMORY=0.8), _scores(MEMORY=0.9, ACTION=0.45)),  # single, right
    (["PLANNING"], _probs(REASONING=0.5, PLANNING=0.3), _scores(PLANNING=0.4)),  # wrong, fallback
    (["OUT_OF_SCOPE"], _probs(OUT_OF_SCOPE=0.85), _scores()),  # out of scope, not a single row
]
GOLD = [r[0] for r in ROWS]
PROBS = np.array([r[1] for r in ROWS])
SCORES = np.array([r[2] for r in ROWS])
# what the compound rule (router.compound.resolve_intents) makes of these scores with threshold CT: the
# best other intent at or above CT; [] for a message whose top label is not an intent
INTENTS = [
    ["ACTION", "SEARCH"],
    ["SEARCH", "REASONING"],
    ["ACTION", "MEMORY"],
    [],
    ["SEARCH", "ACTION"],
    ["MEMORY"],
    ["REASONING"],
    [],
]


class _Arrays:
    """A predictor that answers message i with row i of hand-made arrays."""

    labels = LABELS

    def __init__(self, probs, intents=None, distance=None, limit=None, clauses=None):
        self.probs, self.intents, self.distance = np.asarray(probs), intents, distance
        self.distance_threshold, self.clauses = limit, clauses
        self.texts = [f"please take care of item number {i} on my list today" for i in range(len(probs))]
        if intents is not None:
            from types import SimpleNamespace

            self.compound_intents, self.compound_spec = HEAD, SimpleNamespace(threshold=CT)
            self.predict_compound = self._predict_compound

    def _rows(self, texts):
        return [self.texts.index(t) for t in texts]

    def predict_with_distance(self, texts):
        i = self._rows(texts)
        return self.probs[i], None if self.distance is None else np.asarray(self.distance)[i]

    def predict_proba(self, texts):
        return self.predict_with_distance(texts)[0]

    def _predict_compound(self, texts):
        i = self._rows(texts)
        probs, dist = self.predict_with_distance(texts)
        clauses = [self.clauses[j] if self.clauses else [] for j in i]
        return probs, dist, SCORES[: len(i)], [self.intents[j] for j in i], clauses


def _route(probs, intents=None, config=None, **kw):
    """What the router (eval.metrics.routed) does with each row: compound intents ``intents``, or none."""
    arrays = _Arrays(probs, intents, **kw)
    router = Router(PredictorClassifier(arrays), config or RouterConfig.load(), threshold=TAU)
    return routed_rows(decide(router, arrays.texts), predicted_intents(arrays.probs, LABELS, intents))


def _metrics(with_head=True, config=None, **kw):
    head = dict(intents=INTENTS, compound_threshold=CT) if with_head else {}
    routed = _route(PROBS, INTENTS if with_head else None, config, **kw)
    return compound_metrics(GOLD, TAU, routed=routed, config=config, **head)


def test_routed_rows_follow_the_router():
    r = _route(PROBS, INTENTS)
    assert r.predicted == [
        ["ACTION", "SEARCH"],
        ["SEARCH", "REASONING"],
        ["ACTION", "MEMORY"],
        ["OUT_OF_SCOPE"],
        ["SEARCH", "ACTION"],
        ["MEMORY"],
        ["REASONING"],
        ["OUT_OF_SCOPE"],
    ]
    assert r.status == ["accepted", "accepted", "fallback", "out_of_scope"] + ["accepted"] * 2 + [
        "fallback",
        "out_of_scope",
    ]
    skills = [set(s) for s in r.skills]  # granted or denied: what the intents load before RBAC
    fallback = {"retrieval", "synthesis", "reflection"}  # SEARCH + REASONING, the default config's
    assert skills[0] == {"action", "retrieval", "reflection"} and skills[2] == fallback
    assert skills[3] == set() and skills[5] == {"memory", "reflection"} and skills[6] == fallback
    assert r.budget.tolist() == [4500, 3000, 3000, 0, 4500, 1500, 3000, 0]


def test_compound_metrics_hand_case():
    m = _metrics()
    assert m["compound_head"] is True and m["compound_threshold"] == CT and m["tau"] == TAU
    assert m["compound"] == {
        "n": 4,
        "both_found": 0.75,  # rows 0-2 (row 2 below tau still counts: classifier level)
        "exact_order": 0.5,
        "primary_correct": 0.5,
        "skills_of_both_loaded": 0.5,  # the fallback lacks ACTION's and MEMORY's skills; out of scope none
        "accepted": 0.5,
        "fallback": 0.25,
        "out_of_scope": 0.25,
    }
    assert m["single"] == pytest.approx({"n": 3, "accuracy": 2 / 3, "exact": 1 / 3, "called_compound": 1 / 3})
    pi = m["per_intent"]
    assert pi["SEARCH"] == pytest.approx(
        {"precision": 1, "recall": 0.75, "f1": 6 / 7, "support": 4}, abs=1e-6
    )
    assert pi["ACTION"] == pytest.approx({"precision": 2 / 3, "recall": 1, "f1": 0.8, "support": 2}, abs=1e-6)
    assert pi["MEMORY"]["f1"] == 1 and pi["REASONING"]["f1"] == pytest.approx(2 / 3, abs=1e-6)
    assert pi["PLANNING"] == {"precision": 0, "recall": 0, "f1": 0, "support": 2}
    assert m["macro_f1"] == pytest.approx((6 / 7 + 0.8 + 1 + 2 / 3) / 5, abs=1e-6)
    s = m["skills"]
    assert s["skills_per_message"] == pytest.approx(17 / 8) and s["budget_per_message"] == 2437.5
    assert s["every_skill"] == {"skills": 6, "budget": 7500}  # 3500 + 2500 (action) + 1500 (memory)
    assert s["token_savings"] == pytest.approx(1 - 2437.5 / 7500)
    assert s["gold_skills_per_message"] == 2.5 and s["gold_budget_per_message"] == 2750


def test_without_a_compound_head_every_message_is_single():
    m = _metrics(with_head=False)
    assert m["compound_head"] is False and m["compound_threshold"] is None
    c = m["compound"]
    assert c["both_found"] == 0 and c["exact_order"] == 0 and c["primary_correct"] == 0.5
    assert c["skills_of_both_loaded"] == 0  # ACTION alone lacks retrieval, SEARCH alone synthesis
    assert m["single"]["called_compound"] == 0 and m["single"]["exact"] == pytest.approx(2 / 3)  # the twin


def test_distance_and_config_change_the_routing():
    dist = np.array([0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])
    dist[0] = 9.0  # out of scope by distance: nothing loaded
    cfg = RouterConfig.load()
    cfg.fallback_intents = ["ACTION", "MEMORY"]
    m = _metrics(distance=dist, limit=1.0, config=cfg)
    assert m["compound"]["out_of_scope"] == 0.5 and m["compound"]["both_found"] == 0.75
    assert m["compound"]["skills_of_both_loaded"] == 0.5  # row 0 lost, row 2's fallback now has both


# -------------------------------------------------------------------------------- the gate
SECTION = {
    "compound": {"n": 100, "both_found": 0.8, "skills_of_both_loaded": 0.9},
    "single": {"n": 27, "called_compound": 0.1},
    "data_single": {"n": 594, "called_compound": 0.02},
    "skills": {"skills_per_message": 2.6},
}


def _creport(**change):
    r = _report()
    r["compound"] = copy.deepcopy(SECTION)
    for key, value in change.items():
        part, name = key.split("__")
        r["compound"][part][name] = value
    return r


def test_make_baseline_writes_the_compound_limits():
    b = make_baseline(_creport())
    c = b["compound"]
    assert set(c) == {
        "both_found",
        "skills_of_both_loaded",
        "single_called_compound",
        "data_called_compound",
        "skills_per_message",
    }
    assert c["both_found"] == {"baseline": 0.8, "op": ">=", "limit": pytest.approx(0.77)}
    assert c["single_called_compound"]["limit"] == pytest.approx(
        0.1 + DEFAULT_POLICY["single_compound_margin"]
    )
    assert c["skills_per_message"] == {"baseline": 2.6, "op": "<=", "limit": pytest.approx(2.85)}
    assert make_baseline(_report())["compound"] is None
    assert make_baseline(_creport(), compound_tolerance=0.1)["compound"]["both_found"]["limit"] == 0.7


@pytest.mark.parametrize(
    "change, failing",
    [
        (dict(compound__both_found=0.76), "compound.both_found"),
        (dict(compound__skills_of_both_loaded=0.86), "compound.skills_of_both_loaded"),
        (dict(single__called_compound=0.15), "compound.single_called_compound"),
        (dict(data_single__called_compound=0.04), "compound.data_called_compound"),
        (dict(skills__skills_per_message=3.0), "compound.skills_per_message"),
    ],
)
def test_gate_fails_when_a_compound_limit_is_broken(change, failing):
    base = make_baseline(_creport())
    checks = run_gate(_creport(), base)
    assert gate_passed(checks) and sum(c.name.startswith("compound.") for c in checks) == 5
    ok = run_gate(_creport(compound__both_found=0.78, skills__skills_per_message=2.8), base)
    assert gate_passed(ok)
    checks = run_gate(_creport(**change), base)
    assert [c.name for c in checks if not c.passed] == [failing]
    row = next(r for r in gate_rows(checks) if r[0] == failing)
    assert row[4] == "FAIL"


def test_gate_without_compound_in_the_baseline_or_the_report():
    old = make_baseline(_report())
    assert gate_passed(run_gate(_creport(compound__both_found=0.0), old))  # not gated
    checks = run_gate(_report(), make_baseline(_creport()))
    failed = [c for c in checks if not c.passed]
    assert len(failed) == 5 and all("--compound" in c.detail for c in failed)


# ---------------------------------------------------------------------- report and CLI
class _Stub:
    """Right on every message; with ``head``, also scores the second intent of compound rows."""

    backend, variant, manifest, model_id = "onnx", None, None, "stub@0/none"
    labels = tuple(LABELS)

    def __init__(self, rows, head=True):
        self.rows = {r["text"]: r.get("labels") or [r["label"]] for r in rows}
        if head:
            from types import SimpleNamespace

            self.compound_intents, self.compound_spec = HEAD, SimpleNamespace(threshold=CT)
            self.predict_compound = self._predict_compound

    def predict_proba(self, texts):
        return np.array([_probs(**{self.rows[t][0]: 0.9}) for t in texts])

    def _predict_compound(self, texts):
        scores = [_scores(**dict.fromkeys(self.rows[t], 0.9)) for t in texts]
        intents = [[x for x in self.rows[t] if x != "OUT_OF_SCOPE"] for t in texts]
        return self.predict_proba(texts), None, np.array(scores), intents, [[] for _ in texts]


def _rows(path):
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture
def compound_file(tmp_path):
    rows = [
        {"text": "find the Q3 board deck and email it to Maria", "labels": ["ACTION", "SEARCH"]},
        {"text": "which order did I mention? refund it", "labels": ["ACTION", "MEMORY"]},
        {"text": "find the Q3 board deck", "label": "SEARCH", "twin": True},
    ]
    path = tmp_path / "compound.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path, rows


@pytest.mark.parametrize("head", [True, False])
def test_report_has_a_valid_compound_section(compound_file, head):
    path, rows = compound_file
    stub = _Stub(_rows(TINY / "test.jsonl") + rows, head=head)
    r = run_evaluation(None, TINY / "test.jsonl", compound=path, predictor=stub, max_latency_samples=0)
    validate_json(r, load_schema())
    c = r["compound"]
    assert c["source"] == str(path) and c["n"] == 3 and c["compound_head"] is head
    assert c["compound"]["n"] == 2 and c["single"]["n"] == 1 and c["data_single"]["n"] == 10
    assert c["compound"]["both_found"] == (1.0 if head else 0.0)
    assert c["compound"]["skills_of_both_loaded"] == (1.0 if head else 0.0)
    assert c["single"]["called_compound"] == 0 and c["data_single"]["called_compound"] == 0
    assert (
        run_evaluation(None, TINY / "test.jsonl", predictor=stub, max_latency_samples=0)["compound"] is None
    )
    from eval.reports.markdown import render_markdown, summary_rows

    md = render_markdown(r, plots=False)
    assert "## Compound requests" in md and "both intents found" in md
    assert any(row[0].startswith("compound: both intents found") for row in summary_rows(r))
    schema = load_schema()
    mini_validate(r, schema, schema, "$")  # the fallback validator too, so that the next check bites
    bad = copy.deepcopy(r)
    bad["compound"]["compound"]["both_found"] = 1.5
    with pytest.raises(AssertionError):
        mini_validate(bad, schema, schema, "$")


def test_cli_eval_compound_with_an_old_model(compound_file, tmp_path, monkeypatch):
    """``eval --compound FILE`` with a model without a compound head: every message single."""
    from typer.testing import CliRunner

    import training.measure.backends
    from cli import app

    path, rows = compound_file
    stub = _Stub(_rows(TINY / "test.jsonl") + rows, head=False)
    monkeypatch.setattr(training.measure.backends, "load_predictor", lambda *a, **k: stub)
    out = tmp_path / "out"
    args = ["eval", "--model", str(tmp_path), "--data", str(TINY / "test.jsonl"), "--compound", str(path)]
    r = CliRunner().invoke(app, [*args, "--out", str(out), "--max-latency-samples", "0"])
    assert r.exit_code == 0, r.output
    report = json.loads((out / "eval.json").read_text())
    assert report["compound"]["compound_head"] is False and report["compound"]["compound"]["both_found"] == 0
    assert "Compound requests" in (out / "report.md").read_text()


def test_two_intents_sharing_the_confidence_are_accepted_together():
    """As the router's confident_compound: top-1 below tau, but the two intents the message asks for
    together at or above it; without the second intent the message falls back."""
    probs = np.array([_probs(ACTION=0.5, SEARCH=0.4)])
    r = _route(probs, [["ACTION", "SEARCH"]])
    assert r.predicted == [["ACTION", "SEARCH"]] and r.status == ["accepted"]
    assert set(r.skills[0]) == {"action", "retrieval", "reflection"}
    r = _route(probs, [["ACTION"]])
    assert r.predicted == [["ACTION"]] and r.status == ["fallback"]
