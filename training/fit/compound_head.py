"""The compound head: what the router needs to find a compound request's two intents
(router.compound.resolve_intents).

- a one-vs-rest logistic regression per intent on the body embedding, trained on single-intent rows
  (one intent positive), two-intent rows (both) and out-of-scope rows (none); export writes it into
  the ONNX graph (output ``intent_scores``);
- a stacker, a logistic regression over (logit of the one-vs-rest score, the intent's best clause
  probability, whether the message has clauses), trained on the training rows with one-vs-rest scores
  cross-fitted (5 folds) so that it does not learn to trust scores of rows the head has seen;
- the end-goal order of each intent pair, counted on the two-intent training rows;
- the thresholds, fitted on dev: the lowest clause threshold that calls at most ``max_single_compound`` of
  the dev single-intent messages compound, then the lowest whole-message threshold within the same share
  (``CompoundHead.fit_threshold``);
- optionally the in-context clause reader (``fit_clause_reader``): a softmax head over a clause's pooled
  token states inside the whole message, trained on the probabilities the model gives the clause read
  alone, so that the router reads clauses without a second graph run.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from eval.metrics.calibration import softmax
from router.compound import pair_key, resolve_intents
from router.intents import RESERVED
from router.manifest import ClauseReader, Compound

FILE = "compound_head.npz"
DEFAULT_MAX_SINGLE_COMPOUND = 0.015
DEFAULT_CLAUSE_MIN = 0.5
# the whole-message path's highest threshold: fitted lower when dev's single messages leave room for it
DEFAULT_WHOLE_MIN = 0.7
THRESHOLD_GRID = tuple(round(x, 2) for x in np.arange(0.10, 0.951, 0.01))
FOLDS = 5


@dataclass
class CompoundHead:
    intents: list[str]
    coef: np.ndarray  # (intents, dim)
    intercept: np.ndarray  # (intents,)
    weights: list[float] = field(default_factory=lambda: [1.0, 0.0, 0.0])
    bias: float = 0.0
    primary_order: dict[str, str] = field(default_factory=dict)
    clause_min: float = DEFAULT_CLAUSE_MIN
    threshold: float | None = None
    whole_threshold: float | None = None
    max_single_compound: float | None = None
    reader_layers: list[int] | None = None  # the in-context clause reader (None: a second run)
    reader_coef: np.ndarray | None = None  # (labels, width)
    reader_intercept: np.ndarray | None = None  # (labels,)

    # ------------------------------------------------------------------------------- fitting
    @classmethod
    def fit(
        cls,
        embeddings: np.ndarray,
        label_sets: Sequence[Sequence[str]],
        clause_best: Sequence[dict[str, float]],
        order: Sequence[str],
        c: float = 4.0,
        seed: int = 0,
    ) -> CompoundHead:
        """Fit the one-vs-rest head, the stacker and the pair order. ``clause_best`` holds, per row, each
        label's best probability over the row's clauses ({} for a row without clauses). ``order``: the
        model's intents, in the order the head lists those the rows name."""
        from sklearn.linear_model import LogisticRegression
        from sklearn.model_selection import StratifiedKFold, cross_val_predict

        x = np.asarray(embeddings, dtype=np.float64)
        intents = [i for i in order if any(i in s for s in label_sets)]
        coef, intercept, crossed = [], [], []
        for intent in intents:
            y = np.array([intent in s for s in label_sets], dtype=int)
            if y.min() == y.max():
                raise ValueError(f"the compound head needs rows with and without {intent}")
            lr = LogisticRegression(C=c, max_iter=3000).fit(x, y)
            coef.append(lr.coef_[0])
            intercept.append(lr.intercept_[0])
            folds = StratifiedKFold(
                n_splits=min(FOLDS, int(y.sum()), int((1 - y).sum())), shuffle=True, random_state=seed
            )
            crossed.append(
                cross_val_predict(
                    LogisticRegression(C=c, max_iter=3000), x, y, cv=folds, method="predict_proba"
                )[:, 1]
            )
        head = cls(intents=intents, coef=np.stack(coef), intercept=np.array(intercept))
        q = np.stack(crossed, axis=1)
        rows, targets = [], []
        for i, labels in enumerate(label_sets):
            if not labels:
                continue
            for j, intent in enumerate(intents):
                if intent != labels[0]:  # the primary is the classifier's; the stacker finds the other
                    rows.append(_features(q[i, j], clause_best[i].get(intent, 0.0), bool(clause_best[i])))
                    targets.append(intent in labels)
        stacker = LogisticRegression(C=1.0, max_iter=2000).fit(np.array(rows), np.array(targets))
        head.weights, head.bias = [float(w) for w in stacker.coef_[0]], float(stacker.intercept_[0])
        pairs = Counter(tuple(s) for s in label_sets if len(s) == 2)
        # sorted, not a set's order (which varies from run to run): the same build writes the same manifest
        for a, b in sorted({tuple(sorted(p)) for p in pairs}):
            head.primary_order[pair_key(a, b)] = a if pairs[(a, b)] >= pairs[(b, a)] else b
        return head

    def fit_threshold(
        self,
        primaries: Sequence[str],
        scores: np.ndarray,
        clause_probs: Sequence[Sequence[dict[str, float]]],
        label_sets: Sequence[Sequence[str]],
        max_single_compound: float = DEFAULT_MAX_SINGLE_COMPOUND,
    ) -> float:
        """The thresholds on held-out single-intent in-scope messages (with their predicted primary, as the
        router sees them): first the lowest ``threshold`` at which at most ``max_single_compound`` of them
        are called compound with the whole-message path at its ceiling (``DEFAULT_WHOLE_MIN``), then the
        lowest ``whole_threshold`` (from ``threshold`` up to that ceiling) that keeps within the same share.
        The clause path's evidence is the stronger, so it is fitted first; the whole-message path, which
        adds the intent a message implies without a clause of its own ("play the album you recommended"),
        gets what the share leaves. Returns ``threshold``."""
        single = [i for i, s in enumerate(label_sets) if len(s) == 1 and s[0] not in RESERVED]
        if not single:
            raise ValueError("fitting the compound threshold needs held-out single-intent messages")
        rows = [(primaries[i], self.score_map(scores[i]), clause_probs[i]) for i in single]
        self.threshold = _lowest(
            THRESHOLD_GRID, lambda t: self._called(rows, t, DEFAULT_WHOLE_MIN), max_single_compound
        )
        ceiling = max(DEFAULT_WHOLE_MIN, self.threshold)
        wholes = [w for w in THRESHOLD_GRID if self.threshold <= w < ceiling] + [ceiling]
        self.whole_threshold = _lowest(
            wholes, lambda w: self._called(rows, self.threshold, w), max_single_compound
        )
        self.max_single_compound = float(max_single_compound)
        return self.threshold

    def _called(self, rows, threshold: float, whole: float) -> float:
        """The share of ``rows`` (primary, scores, clause probabilities) called compound at ``threshold``
        and whole-message threshold ``whole``."""
        spec = self.spec(threshold=threshold, max_single=0.0)
        spec.whole_threshold = whole
        return float(np.mean([len(resolve_intents(p, spec, m, c)) > 1 for p, m, c in rows]))

    # ------------------------------------------------------------------------------ applying
    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        """(n, intents) one-vs-rest probabilities."""
        z = np.asarray(embeddings, dtype=np.float64) @ self.coef.T + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def score_map(self, row: np.ndarray) -> dict[str, float]:
        return dict(zip(self.intents, map(float, row), strict=True))

    def spec(self, threshold: float | None = None, max_single: float | None = None) -> Compound:
        """The manifest's ``compound`` section for this head."""
        t = self.threshold if threshold is None else threshold
        return Compound(
            intents=list(self.intents),
            threshold=t,
            whole_threshold=self.whole_threshold or max(DEFAULT_WHOLE_MIN, t),
            clause_min=self.clause_min,
            weights=list(self.weights),
            bias=self.bias,
            primary_order=dict(self.primary_order),
            max_single_compound=self.max_single_compound if max_single is None else max_single,
            reader=ClauseReader(layers=list(self.reader_layers)) if self.reader_layers else None,
        )

    # ------------------------------------------------------------------------------- storage
    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE
        settings = {
            "intents": self.intents,
            "weights": self.weights,
            "bias": self.bias,
            "primary_order": self.primary_order,
            "clause_min": self.clause_min,
            "threshold": self.threshold,
            "whole_threshold": self.whole_threshold,
            "max_single_compound": self.max_single_compound,
            "reader_layers": self.reader_layers,
        }
        reader = (
            {"reader_coef": self.reader_coef, "reader_intercept": self.reader_intercept}
            if self.reader_layers
            else {}
        )
        np.savez(
            path, coef=self.coef, intercept=self.intercept, settings=np.array(json.dumps(settings)), **reader
        )
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CompoundHead | None:
        path = Path(directory) / FILE
        if not path.is_file():
            return None
        z = np.load(path)
        settings = json.loads(str(z["settings"]))
        reader = {k: z[k] for k in ("reader_coef", "reader_intercept") if k in z}
        return cls(coef=z["coef"], intercept=z["intercept"], **settings, **reader)


def _lowest(grid: Sequence[float], share_called, most: float) -> float:
    """The first value of ``grid`` (rising) whose ``share_called`` is at most ``most``; its last otherwise."""
    for value in grid:
        if share_called(value) <= most:
            return float(value)
    return float(grid[-1])


def fit_clause_reader(
    vectors: Sequence[np.ndarray],
    targets: Sequence[np.ndarray],
    l2: float = 1e-4,
    folds: int = FOLDS,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """The in-context clause head: softmax(v W^T + b) fitted by soft-target cross-entropy (L-BFGS) from
    each message's clause vectors (router.compound.clause_vectors, (clauses, width)) to the probabilities
    of the same clauses read alone ((clauses, labels)). Returns (coef, intercept, predictions), the
    predictions cross-fitted by message (``folds`` folds) so that the stacker fitted on them does not
    learn to trust clauses the head has seen. Soft targets, not the top label: the stacker reads the
    probability, and a fragment's own probabilities are often spread (measured on dev: a linear head on
    normalised mean states of layers [1, 2] agreed with the clause read alone on 91% of top labels)."""
    sizes = [len(v) for v in vectors]
    if not sum(sizes):
        raise ValueError("the clause reader needs messages that split into clauses")
    x = np.concatenate([v for v in vectors if len(v)]).astype(np.float32)
    y = np.concatenate([t for t in targets if len(t)]).astype(np.float32)
    owner = np.repeat(np.arange(len(sizes)), sizes)
    crossed = np.zeros_like(y)
    messages = np.unique(owner)
    rng = np.random.default_rng(seed)
    fold_of = dict(zip(messages.tolist(), rng.permutation(len(messages)) % max(2, folds), strict=True))
    k = np.array([fold_of[int(o)] for o in owner])
    for f in range(max(2, folds)):
        w, b = _softmax_fit(x[k != f], y[k != f], l2)
        crossed[k == f] = softmax(x[k == f] @ w.T + b)
    w, b = _softmax_fit(x, y, l2)
    out, j = [], 0
    for n in sizes:
        out.append(crossed[j : j + n])
        j += n
    return w, b, out


def _softmax_fit(
    x: np.ndarray, y: np.ndarray, l2: float, iterations: int = 300
) -> tuple[np.ndarray, np.ndarray]:
    import torch

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    w = torch.zeros(y.shape[1], x.shape[1], requires_grad=True)
    b = torch.zeros(y.shape[1], requires_grad=True)
    opt = torch.optim.LBFGS([w, b], max_iter=iterations, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = -(yt * torch.log_softmax(xt @ w.T + b, dim=1)).sum(dim=1).mean() + l2 * (w**2).sum()
        loss.backward()
        return loss

    opt.step(closure)
    return w.detach().numpy().astype(np.float32), b.detach().numpy().astype(np.float32)


def _features(score: float, clause: float, has_clauses: bool) -> list[float]:
    """The stacker's inputs, as router.compound.stacked_scores computes them."""
    q = min(max(float(score), 1e-6), 1 - 1e-6)
    return [float(np.log(q / (1 - q))), float(clause), 1.0 if has_clauses else 0.0]
