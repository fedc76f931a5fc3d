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


def head_from_softmax_weights(coef: np.ndarray, intercept: np.ndarray, labels) -> object:
    """A scikit-learn logistic head that gives ``softmax_weights``' logits back (one row per label, in
    ``labels`` order, which must be sorted as scikit-learn's ``classes_`` are): the head of a model read
    back from its graph (training.export.readback), whose build fitted it."""
    from sklearn.linear_model import LogisticRegression

    head = LogisticRegression()
    head.coef_ = np.asarray(coef, dtype=np.float64)
    head.intercept_ = np.asarray(intercept, dtype=np.float64).reshape(-1)
    head.classes_ = np.asarray(labels)
    head.n_features_in_ = head.coef_.shape[1]
    return head
