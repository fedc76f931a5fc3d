"""The review queue's pieces that need no decision log of the shipped model: normalising, k-means, the
round robin over clusters, and a follow-up's previous turn kept from the log to the queue."""

from __future__ import annotations

import numpy as np

from eval.review.clusters import kmeans
from eval.review.queue import Entry, entry_of, normalise, round_robin
from eval.review.queue_files import label_studio_tasks, row_of
from router.decision_log import DecisionLog, read_log
from tests.conftest import SHIPPED
from tests.test_review import CRAFTED


def test_normalise_folds_case_punctuation_whitespace_and_digits():
    assert len({normalise(t) for t in CRAFTED}) == 1
    assert normalise("Don't  restart it!") == normalise("dont restart it") == "dont restart it"
    assert normalise("find the deck") != normalise("find the desk")
    assert normalise("???") == "???" and normalise(" 🙂 ") == "🙂"


def test_kmeans_is_seeded_and_finds_separate_groups():
    rng = np.random.default_rng(0)
    centres = np.eye(4) * 10
    x = np.concatenate([c + rng.normal(size=(20, 4)) for c in centres])
    labels = kmeans(x, 4, seed=3)
    assert (labels == kmeans(x, 4, seed=3)).all()
    assert all(len(set(labels[i * 20 : (i + 1) * 20])) == 1 for i in range(4))
    assert len(set(labels)) == 4 and labels[0] == 0  # numbered by first member
    assert len(set(kmeans(x[:2], 5))) <= 2


def test_round_robin_spreads_over_clusters_most_urgent_first():
    def e(i, why, cluster, conf=0.5):
        return Entry(i, f"m{i}", "viewer", "m", None, conf, "x", why, None, {}, cluster=cluster)

    entries = [
        e(0, ["small_margin"], 0),
        e(1, ["verifier_disagreed"], 0),
        e(2, ["below_threshold"], 0, 0.6),
        e(3, ["below_threshold"], 1, 0.3),
        e(4, ["confident_sample"], 1),
        e(5, ["near_scope_boundary"], 2),
    ]
    picked = round_robin(entries, {"other": 3, "confident": 1})
    assert [p.index for p in picked] == [1, 3, 5, 4]
    picked = round_robin(entries, {"other": 5, "confident": 0})
    assert [p.index for p in picked] == [1, 3, 5, 2, 0]


def test_a_follow_up_keeps_its_previous_turn_from_the_log_to_the_queue(tmp_path):
    """Sent with the previous turn's Decision (as serve's `previous: {"decision": ...}`) or its message,
    a follow-up's record holds what the caller sent, and so do its queue row and Label Studio task."""
    from router import Router

    router = Router.load(SHIPPED)
    with DecisionLog(tmp_path / "log") as log:
        router.decision_log = log
        first = router.route("restart the indexing service in us-east", "admin")
        router.route("hmm maybe the other one instead", "admin", previous=first)
        router.route("and what about the second region", "admin", context="restart the indexing service")
    by_text = {r["message"]: r for r in read_log(tmp_path / "log")}
    assert by_text["hmm maybe the other one instead"]["previous_intents"] == ["ACTION"]
    assert "previous_message" not in by_text["hmm maybe the other one instead"]  # the caller sent none
    assert by_text["and what about the second region"]["previous_message"] == "restart the indexing service"
    entries = [entry_of(r, i, ["below_threshold"]) for i, r in enumerate(read_log(tmp_path / "log"))]
    rows = {r["text"]: r for r in (row_of(e, False) for e in entries)}
    assert rows["hmm maybe the other one instead"]["previous_intents"] == ["ACTION"]
    assert rows["and what about the second region"]["previous_message"] == "restart the indexing service"
    tasks = {t["data"]["text"]: t["data"] for t in label_studio_tasks(list(rows.values()))}
    assert tasks["hmm maybe the other one instead"]["previous_intents"] == "ACTION"
    assert tasks["and what about the second region"]["previous_message"] == "restart the indexing service"
