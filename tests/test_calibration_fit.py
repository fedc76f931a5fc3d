"""Temperature scaling on held-out rows, and what happens when they cannot place the temperature."""

from __future__ import annotations

import numpy as np

from training.fit.calibrate import TEMPERATURE_PRIOR, fit_temperature, fit_temperature_or_prior


def test_rows_the_head_ranks_all_right_keep_the_prior_instead_of_the_lower_bound():
    """A handful of easy dev rows (an example project's): the NLL falls as T shrinks, so the fit would run
    into its bound and call every message 1.00. The prior is kept, with a note that says why."""
    logits = np.array([[4.0, 1.0, 0.0], [0.5, 3.0, 0.0], [0.0, 1.0, 2.5], [3.0, 0.0, 1.0]])
    y = np.array([0, 1, 2, 0])
    assert fit_temperature(logits, y) < 0.05  # what a plain fit does with them: its lower bound, 0.02
    t, note = fit_temperature_or_prior(logits, y)
    assert t == TEMPERATURE_PRIOR and "4 held-out rows" in note


def test_rows_with_a_miss_are_fitted():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 3, 300)
    logits = rng.normal(0, 1, (300, 3))
    logits[np.arange(300), y] += 1.5  # right most of the time, not always
    t, note = fit_temperature_or_prior(logits, y)
    assert note is None and t == fit_temperature(logits, y) and 0.05 < t < 20
