"""Temperature scaling (Guo et al., 2017): one scalar T fitted on dev logits by minimising NLL."""

from __future__ import annotations

import numpy as np
from scipy.optimize import minimize_scalar

from eval.calibration import nll, softmax


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
