"""The one-vs-rest intent head behind compound requests: a logistic regression per intent on the body
embedding, trained on single-intent rows (one intent positive), two-intent rows (both positive) and
out-of-scope rows (none). The softmax head still picks the primary intent; these scores name a second
one (router.compound.secondary_intent) when the best other intent reaches a threshold fitted on dev.
Export writes the same computation into the ONNX graph (output ``intent_scores``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router.compound import secondary_intent
from router.intents import INTENTS

FILE = "compound_head.npz"
DEFAULT_MAX_SINGLE_COMPOUND = 0.01
THRESHOLD_GRID = np.round(np.arange(0.20, 0.951, 0.01), 2)


@dataclass
class CompoundHead:
    intents: list[str]
    coef: np.ndarray  # (intents, dim)
    intercept: np.ndarray  # (intents,)
    threshold: float | None = None
    max_single_compound: float | None = None

    @classmethod
    def fit(
        cls, embeddings: np.ndarray, label_sets: Sequence[Sequence[str]], c: float = 4.0, max_iter: int = 3000
    ) -> CompoundHead:
        """One logistic regression per intent; a row is positive for every intent of its label set."""
        from sklearn.linear_model import LogisticRegression

        x = np.asarray(embeddings, dtype=np.float64)
        intents = [i for i in INTENTS if any(i in s for s in label_sets)]
        coef, intercept = [], []
        for intent in intents:
            y = np.array([intent in s for s in label_sets], dtype=int)
            if y.min() == y.max():
                raise ValueError(f"the compound head needs rows with and without {intent}")
            lr = LogisticRegression(C=c, max_iter=max_iter).fit(x, y)
            coef.append(lr.coef_[0])
            intercept.append(lr.intercept_[0])
        return cls(intents=intents, coef=np.stack(coef), intercept=np.array(intercept))

    def scores(self, embeddings: np.ndarray) -> np.ndarray:
        """(n, intents) one-vs-rest probabilities."""
        z = np.asarray(embeddings, dtype=np.float64) @ self.coef.T + self.intercept
        return 1.0 / (1.0 + np.exp(-z))

    def secondary(self, primaries: Sequence[str | None], scores: np.ndarray, threshold: float | None = None):
        """The second intent of each message (None for single-intent ones), by the router's rule."""
        t = self.threshold if threshold is None else threshold
        return [
            secondary_intent(p, dict(zip(self.intents, row.tolist(), strict=True)), t)
            for p, row in zip(primaries, scores, strict=True)
        ]

    def fit_threshold(
        self,
        primaries: Sequence[str],
        scores: np.ndarray,
        label_sets: Sequence[Sequence[str]],
        max_single_compound: float = DEFAULT_MAX_SINGLE_COMPOUND,
    ) -> float:
        """The lowest threshold at which at most ``max_single_compound`` of the held-out single-intent
        in-scope messages are called compound (their predicted primary, as the router would see it)."""
        single = [i for i, s in enumerate(label_sets) if len(s) == 1 and s[0] in INTENTS]
        if not single:
            raise ValueError("fitting the compound threshold needs held-out single-intent messages")
        chosen = float(THRESHOLD_GRID[-1])
        for t in THRESHOLD_GRID:
            second = self.secondary([primaries[i] for i in single], scores[single], float(t))
            if np.mean([s is not None for s in second]) <= max_single_compound:
                chosen = float(t)
                break
        self.threshold, self.max_single_compound = chosen, float(max_single_compound)
        return chosen

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE
        np.savez(
            path,
            intents=np.array(self.intents),
            coef=self.coef,
            intercept=self.intercept,
            threshold=np.nan if self.threshold is None else self.threshold,
            max_single_compound=np.nan if self.max_single_compound is None else self.max_single_compound,
        )
        return path

    @classmethod
    def load(cls, directory: str | Path) -> CompoundHead | None:
        path = Path(directory) / FILE
        if not path.is_file():
            return None
        z = np.load(path)
        t, m = float(z["threshold"]), float(z["max_single_compound"])
        return cls(
            intents=[str(i) for i in z["intents"]],
            coef=z["coef"],
            intercept=z["intercept"],
            threshold=None if np.isnan(t) else t,
            max_single_compound=None if np.isnan(m) else m,
        )
