"""Temperature scaling (Guo et al., 2017): one scalar T fitted on dev logits by minimising NLL."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar

from eval.metrics.calibration import nll, softmax


def fit_temperature(logits: np.ndarray, y: np.ndarray, bounds: tuple[float, float] = (0.02, 20.0)) -> float:
    """The T > 0 minimising NLL(softmax(logits / T), y); searched on log T, which keeps it positive."""
    logits = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y)
    if len(y) == 0:
        raise ValueError("cannot fit a temperature on an empty set")
    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    res = minimize_scalar(
        lambda t: nll(softmax(logits, float(np.exp(t))), y),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-5},
    )
    return float(np.exp(res.x))


TEMPERATURE_PRIOR = 1.0  # the head's own probabilities, kept when the held-out rows cannot place T


def fit_temperature_or_prior(logits: np.ndarray, y: np.ndarray) -> tuple[float, str | None]:
    """``fit_temperature`` on the held-out rows, unless they cannot place T: when the head ranks every row
    right, a sharper softmax always lowers the NLL and the fit runs into its lower bound, which would make
    every answer 1.00 and the threshold and the verifier idle. Then TEMPERATURE_PRIOR, and a note saying
    why; else the fitted T and None."""
    logits, y = np.asarray(logits, dtype=np.float64), np.asarray(y)
    if len(y) and np.all(logits.argmax(axis=1) == y):
        return TEMPERATURE_PRIOR, (
            f"every one of the {len(y)} held-out rows is ranked right, so they cannot place the temperature: "
            f"kept the head's own probabilities (T = {TEMPERATURE_PRIOR}); add dev rows, harder ones, to fit it"
        )
    return fit_temperature(logits, y), None
