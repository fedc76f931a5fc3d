"""Router batching and threads, the decision contract, and no torch at runtime."""

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from router.decision import Decision, decision_json_schema
from router.routing import Router
from tests.conftest import ROOT, SHIPPED


@pytest.fixture(scope="module")
def tiny_router(tiny_exported):
    model_dir, _ = tiny_exported
    return Router.load(model_dir)


# ------------------------------------------------------------------------------- batch and threads
def test_batch_matches_single_messages(tiny_exported):
    """The batching code path gives each message the decision it gets alone (fp32: no quantization
    noise between padded and unpadded rows; the int8 difference is bounded by the parity gate)."""
    tiny_router = Router.load(tiny_exported[0], variant="fp32")
    texts = [
        "find the expense policy",
        "restart the staging cluster",
        "",
        "what did i tell you earlier",
        "compare the two vendor proposals for the new crm system in detail please",
    ]
    batch = tiny_router.route_batch(texts, role="admin")
    for text, b in zip(texts, batch, strict=True):
        s = tiny_router.route(text, role="admin")
        assert (b.intent, b.source, b.skills) == (s.intent, s.source, s.skills)
        if s.confidence is not None:
            assert b.confidence == pytest.approx(s.confidence, abs=1e-4)


def test_batches_are_cut_by_rows_and_padded_tokens():
    from router.batches import length_batches as _chunks

    lengths = [5, 40, 6, 7, 8, 100]
    order = sorted(range(6), key=lengths.__getitem__)  # 0, 2, 3, 4, 1, 5
    assert _chunks(order, lengths, max_rows=32, max_tokens=32) == [[0, 2, 3, 4], [1], [5]]
    # two rows at most: 40 and 100 in one batch would pad 40 to 100, dearer than one more run
    assert _chunks(order, lengths, max_rows=2, max_tokens=10**6, run_cost=10) == [[0, 2], [3, 4], [1], [5]]
    assert _chunks(order, lengths, max_rows=32, max_tokens=1) == [[i] for i in order]  # a row always fits
    assert _chunks([], [], 32, 512) == []
    # a long tail gets a batch of its own unless runs are dear
    assert _chunks([0, 1, 2, 3], [10, 10, 10, 60], 32, 512, run_cost=10) == [[0, 1, 2], [3]]
    assert _chunks([0, 1, 2, 3], [10, 10, 10, 60], 32, 512, run_cost=1000) == [[0, 1, 2, 3]]


def _batch_cost(batches, lengths, run_cost):
    return sum(run_cost + len(b) * max(lengths[i] for i in b) for b in batches)


def _batches_fit(batches, lengths, max_rows, max_tokens):
    return all(
        len(b) == 1 or (len(b) <= max_rows and len(b) * max(lengths[i] for i in b) <= max_tokens)
        for b in batches
    )


def test_batch_cuts_are_the_cheapest_that_fit():
    """Against every way of cutting the sorted rows: no allowed cut costs less (padded tokens + run cost)."""
    import itertools
    import random

    from router.batches import length_batches as _chunks

    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 8)
        lengths = [rng.randint(1, 60) for _ in range(n)]
        order = sorted(range(n), key=lengths.__getitem__)
        max_rows, max_tokens = rng.randint(1, 5), rng.choice([40, 120, 10**6])
        run_cost = rng.choice([0, 10, 50])
        got = _chunks(order, lengths, max_rows, max_tokens, run_cost)
        assert [i for b in got for i in b] == order
        assert _batches_fit(got, lengths, max_rows, max_tokens)
        for cuts in itertools.product([False, True], repeat=n - 1):
            batches, current = [], [order[0]]
            for i, cut in zip(order[1:], cuts, strict=True):
                if cut:
                    batches.append(current)
                    current = []
                current.append(i)
            batches.append(current)
            if _batches_fit(batches, lengths, max_rows, max_tokens):
                assert _batch_cost(got, lengths, run_cost) <= _batch_cost(batches, lengths, run_cost)


def test_the_token_budget_changes_how_a_batch_runs_not_what_it_returns(shipped_router):
    c = shipped_router.classifier
    texts = [json.loads(line)["text"] for line in (ROOT / "data" / "dev.jsonl").open()][:96]
    budget = c.max_tokens
    try:
        c.max_tokens = 10**6
        whole = c.predict_proba(texts)
        c.max_tokens = 64
        small = c.predict_proba(texts)
    finally:
        c.max_tokens = budget
    recipe = c.manifest.export.variants["int8"].recipe
    if not (recipe or "").startswith("rowscaled-int8"):
        # the default model's recipe quantizes activations per row or per block: batch mates do not move a row
        np.testing.assert_allclose(small, whole, atol=1e-4)
    else:
        # the fast model's int8 attention (QAttention) scales its input per tensor, so batch mates move a row
        # within the parity gate: measured on dev and test, max |dp| 0.09-0.10, 1-2 top-1 flips in ~770
        assert np.abs(small - whole).max() <= 0.15
        assert (small.argmax(axis=1) == whole.argmax(axis=1)).mean() >= 0.98


def test_many_threads_give_the_same_answers_as_one(tiny_router):
    lines = (Path(__file__).parent / "fixtures" / "tiny" / "train.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines] * 5
    expected = [(d.intent, round(d.confidence, 4)) for d in (tiny_router.route(t, "admin") for t in texts)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        got = list(pool.map(lambda t: tiny_router.route(t, "admin"), texts))
    assert [(d.intent, round(d.confidence, 4)) for d in got] == expected


# ------------------------------------------------------------------------------ decision contract
def test_decision_fields_and_committed_schema(tiny_router):
    d = tiny_router.route("find the expense policy", role="viewer")
    data = json.loads(d.model_dump_json())
    for key in (
        "intent",
        "confidence",
        "ranking",
        "source",
        "reason_code",
        "skills",
        "denied",
        "requires_confirmation",
        "context_budget",
        "threshold",
        "model_id",
        "latency",
        "trace",
    ):
        assert key in data
    assert set(data["latency"]) == {"tokenize_ms", "inference_ms", "verifier_ms", "total_ms"}
    total = sum(r["probability"] for r in data["ranking"]) + data["scope"]["out_of_scope_probability"]
    assert len(data["ranking"]) == 5 and abs(total - 1) < 1e-4  # the five intents and out of scope
    assert Decision.model_validate(data) == d
    committed = json.loads((ROOT / "router" / "schema" / "decision.schema.json").read_text())
    assert committed == decision_json_schema(), "run 'intent-router schema' after changing Decision"


def test_schema_command_writes_the_committed_schema_into_a_new_folder(tmp_path):
    from typer.testing import CliRunner

    from cli import app

    out = tmp_path / "schemas" / "decision.schema.json"
    res = CliRunner().invoke(app, ["schema", "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text(encoding="utf-8")) == decision_json_schema()
    res = CliRunner().invoke(app, ["schema", "--out", str(tmp_path / "m.json"), "--model", str(SHIPPED)])
    enum = json.loads((tmp_path / "m.json").read_text(encoding="utf-8"))["properties"]["intent"]["anyOf"][0]
    assert set(enum["enum"]) == {"SEARCH", "REASONING", "PLANNING", "MEMORY", "ACTION"}, enum


def test_runtime_does_not_import_torch_setfit_or_sklearn():
    code = (
        "import sys\n"
        "from router import Router\n"
        f"r = Router.load({str(SHIPPED)!r})\n"
        "d = r.route('find the travel policy', role='viewer')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'setfit', 'sklearn', 'transformers', 'sentence_transformers', 'training'))\n"
        "print(d.intent, bad)\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("SEARCH")


def test_the_fast_model_is_a_student_of_the_default_one():
    """models/intent-minilm-fast is distilled from models/intent-minilm: when the default model is
    retrained and committed, the fast one has to be rebuilt from it (training/configs/fast.yaml). A
    re-export of the same training run (its name and created_at) keeps the body the student learned from,
    when the student learned from its checkpoint rather than a body recovered from its graph. Both are
    read as committed (tests/shipped_models.py)."""
    from router.manifest import load_manifest
    from tests.conftest import FAST, SHIPPED

    fast, default = load_manifest(FAST), load_manifest(SHIPPED)
    teacher = fast.training["teacher"]
    graph = default.export.variants[default.export.default_variant].file.sha256
    run = f"{default.name}@{default.created_at}+"
    same_run = teacher["model_id"].startswith(run) and "body" not in teacher
    assert same_run or teacher["graph_sha256"] == graph
    int8 = fast.export.variants["int8"]
    recipes = fast.training["hyperparameters"]["export_recipes"]
    assert int8.parity.passed and int8.recipe in recipes  # the first of its config's recipes that passed
    assert fast.compound is not None and fast.compound.reader is not None  # clauses read in its one run
    assert fast.training["hyperparameters"]["distil_layers"] == [0, 2, 4]
