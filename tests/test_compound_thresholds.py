"""The compound head's thresholds (training.fit.compound_head.CompoundHead.fit_threshold), fitted on hand-made
held-out scores: the clause threshold first, then the whole-message one within the share left."""

import numpy as np
import pytest

from training.fit.compound_head import DEFAULT_WHOLE_MIN, CompoundHead

# a stacker that passes the one-vs-rest score through: stacked score == score for a message without clauses
HEAD = dict(
    intents=["ACTION", "MEMORY"], coef=np.zeros((2, 4)), intercept=np.zeros(2), weights=[1.0, 4.0, 0.0]
)
MEMORY_SCORES = [0.2, 0.3, 0.5, 0.65, 0.05, 0.1, 0.15, 0.25]  # single ACTION messages' MEMORY scores


def _fit(memory_scores, clause_probs=None, most=0.125):
    head = CompoundHead(**HEAD)
    scores = np.array([[0.95, m] for m in memory_scores])
    n = len(memory_scores)
    head.fit_threshold(["ACTION"] * n, scores, clause_probs or [[] for _ in range(n)], [["ACTION"]] * n, most)
    return head


def test_the_whole_message_threshold_falls_as_far_as_the_share_allows():
    head = _fit(MEMORY_SCORES)  # 1 message of 8 may be called compound: the 0.65 one
    assert head.threshold == pytest.approx(0.10)  # no clauses: the clause path calls nothing
    assert head.whole_threshold == pytest.approx(0.51)
    assert _fit(MEMORY_SCORES, most=0.0).whole_threshold == pytest.approx(0.66)


def test_the_whole_message_threshold_stays_at_its_ceiling_when_the_share_is_spent():
    spent = [0.9, 0.69, 0.2, 0.3, 0.05, 0.1, 0.15, 0.25]  # 0.9 takes the one message the share allows
    assert _fit(spent, most=0.125).whole_threshold == DEFAULT_WHOLE_MIN
    over = _fit([0.8, 0.9, *MEMORY_SCORES], most=0.0)  # above the ceiling: the threshold itself rises
    assert over.threshold > 0.8 and over.whole_threshold == over.threshold


def test_the_clause_threshold_is_fitted_first_and_bounds_the_whole_one():
    # every message has a MEMORY clause: the clause path calls them all below a high threshold
    clauses = [[{"ACTION": 0.9, "MEMORY": 0.05}, {"ACTION": 0.3, "MEMORY": 0.6}] for _ in MEMORY_SCORES]
    head = _fit(MEMORY_SCORES, clause_probs=clauses)
    assert head.threshold > 0.5 and head.whole_threshold >= head.threshold
