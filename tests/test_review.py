"""The review queue (`intent-router review`, eval.review.queue): a log of the shipped model's decisions over dev
messages, crafted duplicates and a scripted verifier; every pick justified by its record."""

from __future__ import annotations

import csv
import json
import re
import unicodedata

import pytest
from typer.testing import CliRunner

from cli import app
from eval.review.queue import (
    compound_checks,
    confidently_accepted,
    reasons,
    select,
)
from eval.review.queue_files import read_csv_queue
from router.compound import stacked_scores
from router.decision_log import DecisionLog, config_hash, read_log
from router.manifest import load_manifest
from router.verifier import VerifierError, VerifierResult
from tests.conftest import ROOT, SHIPPED, VAGUE
from tests.verifier_support import ENV_VARS

runner = CliRunner()
# near-duplicates of each other: case, punctuation, whitespace and digits
CRAFTED = [
    "restart the billing worker in eu-west 2",
    "Restart the billing worker in EU-west 3!",
    "restart   the billing worker in eu-west 12.",
]


def near_key(text):
    """The test's own near-duplicate key: lower case, letters only, digits as one 0."""
    t = unicodedata.normalize("NFKC", text).lower().replace("'", "").replace("\u2019", "")
    return " ".join(re.sub(r"[^\w]+|_", " ", re.sub(r"\d+", "0", t)).split())


# every third dev message: about 300, of every label, out of scope and continuations included
_SAMPLE = [json.loads(line)["text"] for line in (ROOT / "data/dev.jsonl").read_text().splitlines()[::3]]
DEV = list({near_key(t): t for t in reversed(_SAMPLE)}.values())[::-1]  # no near-duplicates of their own
WITH_VERIFIER = DEV[100:]  # routed by a router with a scripted verifier


class ScriptedVerifier:
    """SEARCH for every message, except that it times out on every third one it is asked about."""

    intents = None  # takes whatever intents it is asked about

    def __init__(self):
        self.calls = 0

    def verify(self, text, classification, previous=None, context=None):
        self.calls += 1
        if self.calls % 3 == 0:
            raise VerifierError("scripted timeout", status="timeout")
        return VerifierResult(intent="SEARCH")


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """About 320 records: dev messages, exact and near duplicates, and verifier outcomes."""
    from router import Router

    router = Router.load(SHIPPED)
    verified = Router(router.classifier, router.config, verifier=ScriptedVerifier())
    sha = config_hash(router.config)
    plain = [*DEV[:100], DEV[0], DEV[1], DEV[2].upper() + "!!", "  " + DEV[3] + "  ?", *CRAFTED, *VAGUE]
    path = tmp_path_factory.mktemp("decisions")
    with DecisionLog(path) as out:
        for text, d in zip(plain, router.route_batch(plain, "viewer"), strict=True):
            out.write(d, text, sha)
        for text in WITH_VERIFIER:
            out.write(verified.route(text, "admin"), text, sha)
    return path


@pytest.fixture(scope="module")
def records(log):
    return list(read_log(log))


@pytest.fixture(scope="module")
def spec():
    return load_manifest(SHIPPED).compound


def review(log, out, *args, corpus=None):
    """The command on ``log``; the log's dev messages stay in the queue unless ``corpus`` names the corpus
    whose evaluation files they are (an empty folder has none)."""
    corpus = corpus or out.parent / "no-corpus"
    corpus.mkdir(exist_ok=True)
    argv = ["review", str(log), "--out", str(out), "--model", str(SHIPPED), "--data-dir", str(corpus), *args]
    res = runner.invoke(app, argv)
    assert res.exit_code == 0, res.output
    return res


def test_messages_of_the_evaluation_files_are_left_out(log, tmp_path):
    """`data add` would refuse them as leaks: nobody should spend time labelling them."""
    corpus = tmp_path / "data"
    corpus.mkdir()
    (corpus / "dev.jsonl").write_text(
        "".join(json.dumps({"text": t, "label": "SEARCH"}) + "\n" for t in DEV[:50])
    )
    res = review(log, tmp_path / "q.jsonl", "--budget", "1000", corpus=corpus)
    texts = {r["text"] for r in read_rows(tmp_path / "q.jsonl")}
    assert not texts & set(DEV[:50])
    assert any(t in texts for t in DEV[50:100])  # the rest of the log is still reviewed
    assert "records left out: their message is in an evaluation file of" in res.output


def read_rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def first_records(records):
    out = {}
    for r in records:
        out.setdefault(r["message"], r)
    return out


def justified(why, r, spec) -> bool:
    """Recompute one reason from the record."""
    d = r["decision"]
    rank = d["ranking"]
    scope = d["scope"] or {}
    if why == "verifier_disagreed":
        v = r["verifier"]
        return (
            v is not None
            and v["status"] != "absent"
            and (v["status"] != "accepted" or v["intent"] != rank[0]["intent"])
        )
    if why == "below_threshold":
        return (
            r["confidence"] < d["threshold"]
            and "classifier" not in scope["signals"]
            and d["source"] != "guardrail"
        )
    if why == "borderline_compound":
        if r["reason_code"] == "confident_compound":
            return True
        step = next(s for s in d["trace"] if s["stage"] == "compound")["detail"]
        best = {}
        for c in step["clauses"]:
            best[c["label"]] = max(best.get(c["label"], 0), c["probability"])
        stacked = stacked_scores(spec, step["scores"], best)
        primary = next(s for s in d["trace"] if s["stage"] == "classifier")["detail"]["label"]
        limits = (spec.threshold, max(spec.threshold, spec.whole_threshold))
        return any(abs(s - t) <= 0.1 for k, s in stacked.items() if k != primary for t in limits)
    if why == "small_margin":
        return rank[0]["probability"] - rank[1]["probability"] < 0.15
    if why == "near_scope_boundary":
        return 0.9 <= scope["distance"] / scope["distance_threshold"] <= 1.1
    if why == "confident_sample":
        return r["reason_code"] == "confident" and r["intent"] is not None
    raise AssertionError(why)


def test_the_queue_keeps_the_budget_drops_duplicates_and_every_why_is_justified(log, records, spec, tmp_path):
    res = review(log, tmp_path / "q.jsonl", "--budget", "16")
    candidates = int(re.search(r"Review queue: 16 of (\d+) candidates", res.output)[1])
    assert candidates > 16  # the budget binds
    rows = read_rows(tmp_path / "q.jsonl")
    assert len(rows) == 16
    assert len({near_key(r["text"]) for r in rows}) == 16  # no two picks are near-duplicates
    assert len({r["id"] for r in rows}) == 16
    by_text = first_records(records)
    for row in rows:
        r = by_text[row["text"]]
        assert row["why"] and all(justified(w, r, spec) for w in row["why"]), (row, r["decision"]["trace"])
        probs = {x["intent"]: x["probability"] for x in r["decision"]["ranking"]}
        probs["OUT_OF_SCOPE"] = (r["decision"]["scope"] or {}).get("out_of_scope_probability") or 0.0
        top = max(probs, key=probs.get)  # the classifier's most probable label
        routed_none = "OUT_OF_SCOPE" if r["reason_code"] == "out_of_scope" else top
        assert row["suggested"] == (r["intent"] or routed_none) and row["confidence"] == r["confidence"]
        assert row["role"] == r["role"] and row["model_id"] == r["model_id"] and row["label"] == ""
        assert "llm_label" not in row
    whys = {w for row in rows for w in row["why"]}
    assert {"verifier_disagreed", "below_threshold", "confident_sample"} <= whys
    assert sum(row["why"] == ["confident_sample"] for row in rows) == 2  # 10% of the budget, rounded
    assert len({row["cluster"] for row in rows}) >= 4
    assert "6 duplicates removed" in res.output


def test_a_large_budget_takes_every_candidate_once_and_counts_the_duplicates(log, records, spec, tmp_path):
    review(log, tmp_path / "all.jsonl", "--budget", "1000")
    rows = read_rows(tmp_path / "all.jsonl")
    groups: dict[str, list[dict]] = {}
    for r in records:
        groups.setdefault(near_key(r["message"]), []).append(r)
    assert sum(len(g) - 1 for g in groups.values()) == 6  # 4 copies of dev messages, 2 of a crafted one
    # every candidate and every confidently accepted message, once: the budget is larger than them all
    wanted = [g[0] for g in groups.values() if reasons(g[0], spec) or confidently_accepted(g[0])]
    assert sorted(r["text"] for r in rows) == sorted(r["message"] for r in wanted)
    seen = {near_key(row["text"]): row["seen"] for row in rows}
    for key, group in groups.items():
        assert seen.get(key, len(group)) == len(group)
    crafted = [row for row in rows if near_key(row["text"]) == near_key(CRAFTED[0])]
    assert all(row["text"] == CRAFTED[0] for row in crafted)  # the first seen is kept


def test_the_same_seed_gives_the_same_queue(log, tmp_path):
    review(log, tmp_path / "a.jsonl", "--budget", "20", "--seed", "7")
    review(log, tmp_path / "b.jsonl", "--budget", "20", "--seed", "7")
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    review(log, tmp_path / "c.jsonl", "--budget", "20", "--seed", "8")
    a, c = read_rows(tmp_path / "a.jsonl"), read_rows(tmp_path / "c.jsonl")
    assert len(c) == 20

    def drawn(rows):
        return {r["text"] for r in rows if r["why"] == ["confident_sample"]}

    # the confident slice: 10% of the budget, more when the log has too few other candidates to fill it
    assert len(drawn(a)) == len(drawn(c)) >= 2 and drawn(a) != drawn(c)  # another seed, another draw


def test_csv_and_label_studio_outputs_match_the_queue(log, tmp_path):
    review(log, tmp_path / "q.jsonl", "--budget", "15")
    review(
        log, tmp_path / "q.csv", "--budget", "15", "--format", "csv", "--label-studio", tmp_path / "ls.json"
    )
    rows = read_rows(tmp_path / "q.jsonl")
    with (tmp_path / "q.csv").open(newline="", encoding="utf-8") as fh:
        raw = list(csv.DictReader(fh))
    assert list(raw[0]) == [
        "id",
        "text",
        "previous_message",
        "previous_intents",
        "top_intents",
        "role",
        "model_id",
        "suggested",
        "confidence",
        "why",
        "cluster",
        "seen",
        "label",
    ]
    assert read_csv_queue(tmp_path / "q.csv") == rows
    tasks = json.loads((tmp_path / "ls.json").read_text(encoding="utf-8"))
    assert len(tasks) == len(rows) == 15
    for task, row in zip(tasks, rows, strict=True):
        assert task["data"]["text"] == row["text"] and task["data"]["id"] == row["id"]
        assert task["data"]["top_intents"] == ", ".join(row["top_intents"]) and len(row["top_intents"]) == 2
        (pred,) = task["predictions"]
        assert pred["model_version"] == row["model_id"] and pred["score"] == row["confidence"]
        assert pred["result"] == [
            {
                "from_name": "intent",
                "to_name": "text",
                "type": "choices",
                "value": {"choices": [row["suggested"]]},
            }
        ]


@pytest.mark.slow  # starts a loopback OpenAI-compatible server
def test_the_verifier_pre_labels_the_queue(log, records, openai_server, tmp_path, monkeypatch):
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    out = tmp_path / "q.jsonl"
    res = review(
        log, out, "--budget", "12", "--verifier-url", openai_server.base_url, "--verifier-model", "test-model"
    )
    rows = read_rows(out)
    by_text = first_records(records)
    logged = [r for r in rows if (by_text[r["text"]]["verifier"] or {}).get("status") == "accepted"]
    assert logged, "the log's verifier answers should be among the picks"
    for row in logged:
        assert row["llm_label"] == by_text[row["text"]]["verifier"]["intent"]  # from the log, no call
    asked = [r for r in rows if r not in logged]
    assert len(openai_server.chat_requests()) == len(asked) > 0
    assert all(r["llm_label"] == "SEARCH" for r in asked)  # the server's scripted answer
    assert f"{len(logged)} from the log, {len(asked)} asked, 0 failed" in res.output


def test_bad_input_is_one_line_and_a_non_zero_exit(log, tmp_path):
    (tmp_path / "empty").mkdir()
    (tmp_path / "decisions-empty.jsonl").write_text("")
    good = (next(log.glob("decisions-*.jsonl")).read_text().splitlines(keepends=True))[:3]
    (tmp_path / "decisions-bad.jsonl").write_text("".join(good[:2]) + "{not json\n" + good[2])
    cases = [
        ([str(tmp_path / "nope")], "no such decision log"),
        ([str(tmp_path / "empty")], "no decision log files"),
        ([str(tmp_path / "decisions-empty.jsonl")], "has no records"),
        ([str(tmp_path / "decisions-bad.jsonl")], "decisions-bad.jsonl:3: not a decision record"),
        ([str(log), "--budget", "0"], "--budget must be at least 1"),
        ([str(log), "--confident-share", "2"], "--confident-share must be in [0, 1]"),
        ([str(log), "--format", "xml"], "--format must be one of jsonl, csv"),
    ]
    for args, message in cases:
        argv = ["review", *args, "--out", str(tmp_path / "q.jsonl")]
        if "--budget" not in args:
            argv += ["--budget", "5"]
        res = runner.invoke(app, argv)
        assert res.exit_code == 2, (args, res.output)
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and message in res.output.replace("\n", "")
    assert not (tmp_path / "q.jsonl").exists()


# ------------------------------------------------------------------------------- the pieces
def test_without_an_embedding_the_ranking_vectors_are_clustered(records, spec):
    sel = select(records, 10, lambda texts: None, 0.2, 0, spec)
    assert len(sel.picked) == 10 and sel.vectors == "ranking"
    assert sum(e.why == ["confident_sample"] for e in sel.picked) == 2
    with pytest.raises(ValueError, match="budget"):
        select(records, 0, lambda texts: None)


def test_the_compound_comparisons_reproduce_the_routed_verdicts(records, spec):
    """Recomputed from the trace, the compound rule's comparisons call compound what the router did."""
    compared = 0
    for r in records:
        d = r["decision"]
        step = next((s for s in d["trace"] if s["stage"] == "compound"), None)
        if step is None:
            continue
        checks = compound_checks(d, spec)
        whole = checks[-1:] if checks and checks[-1][1] != spec.threshold else []
        pair = checks[: len(checks) - len(whole)]
        two = bool(pair and all(s >= t for s, t in pair)) or bool(whole and whole[0][0] >= whole[0][1])
        assert two == (step["status"] == "two_intents"), (r["message"], checks)
        compared += 1
    assert compared > 100


def test_a_compound_step_that_states_its_threshold_is_read_as_it_is(spec):
    d = {"trace": [{"stage": "compound", "status": "single", "detail": {"score": 0.62, "threshold": 0.7}}]}
    assert compound_checks(d, spec) == [(0.62, 0.7)]
    assert compound_checks({"trace": []}, spec) == []
