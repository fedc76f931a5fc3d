"""The logistic head as the exported graph and the distillation's teacher-head target read it."""

from __future__ import annotations

import numpy as np


def softmax_weights(head) -> tuple[np.ndarray, np.ndarray]:
    """(weight, bias), float32, of a fitted scikit-learn logistic head as one softmax logit per class: a
    binary head has one logit, for its second class, so the first class gets a zero row."""
    coef = np.asarray(head.coef_, dtype=np.float32)
    intercept = np.asarray(head.intercept_, dtype=np.float32)
    if coef.shape[0] == 1:
        coef = np.vstack([np.zeros_like(coef), coef])
        intercept = np.concatenate([np.zeros(1, dtype=np.float32), intercept])
    return coef, intercept
