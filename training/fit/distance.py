"""The distance-based in-scope score: Mahalanobis distance from a body embedding to the nearest
in-scope class mean, with one covariance shared by the classes and shrunk towards its mean variance.

The trained OUT_OF_SCOPE class catches chit-chat like the chit-chat it saw; the distance catches text
unlike every in-scope training example. The threshold is fitted on dev in-scope messages (it keeps a
chosen share of them), and export writes the same computation into the ONNX graph.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

FILE = "in_scope.npz"
DEFAULT_SHRINKAGE = 0.1
DEFAULT_KEEP = 0.99


@dataclass
class InScopeDistance:
    classes: list[str]
    means: np.ndarray  # (classes, dim)
    factor: np.ndarray  # (dim, dim): (x - m)^T P (x - m) == ||(x - m) @ factor||^2
    shrinkage: float = DEFAULT_SHRINKAGE
    threshold: float | None = None
    keep: float | None = None

    @classmethod
    def fit(
        cls,
        embeddings: np.ndarray,
        labels: Sequence[str],
        classes: Sequence[str],
        shrinkage: float = DEFAULT_SHRINKAGE,
    ) -> InScopeDistance:
        """Class means and the shared precision from the rows whose label is in ``classes``."""
        x, y = np.asarray(embeddings, dtype=np.float64), np.asarray(labels)
        classes = [c for c in classes if (y == c).any()]
        if len(classes) < 1:
            raise ValueError("the in-scope distance needs rows of at least one in-scope class")
        means = np.stack([x[y == c].mean(axis=0) for c in classes])
        centred = np.concatenate([x[y == c] - means[i] for i, c in enumerate(classes)])
        cov = np.cov(centred, rowvar=False)
        dim = cov.shape[0]
        cov = (1 - shrinkage) * cov + shrinkage * (np.trace(cov) / dim) * np.eye(dim)
        # P = cov^-1 = L L^T with L = cholesky(P), so (x - m)^T P (x - m) = ||(x - m) @ L||^2
        factor = np.linalg.cholesky(np.linalg.inv(cov))
        return cls(classes=list(classes), means=means, factor=factor, shrinkage=shrinkage)

    def distance(self, embeddings: np.ndarray) -> np.ndarray:
        proj = np.asarray(embeddings, dtype=np.float64) @ self.factor
        centres = self.means @ self.factor
        d2 = ((proj[:, None, :] - centres[None, :, :]) ** 2).sum(axis=-1)
        return d2.min(axis=1)

    def fit_threshold(self, in_scope_embeddings: np.ndarray, keep: float = DEFAULT_KEEP) -> float:
        """The distance below which ``keep`` of these (held-out, in-scope) messages fall."""
        if not 0 < keep <= 1:
            raise ValueError(f"keep must be in (0, 1], got {keep}")
        d = self.distance(in_scope_embeddings)
        self.threshold, self.keep = float(np.quantile(d, keep)), float(keep)
        return self.threshold

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE
        np.savez(
            path,
            classes=np.array(self.classes),
            means=self.means,
            factor=self.factor,
            shrinkage=self.shrinkage,
            threshold=np.nan if self.threshold is None else self.threshold,
            keep=np.nan if self.keep is None else self.keep,
        )
        return path

    @classmethod
    def load(cls, directory: str | Path) -> InScopeDistance | None:
        path = Path(directory) / FILE
        if not path.is_file():
            return None
        z = np.load(path)
        threshold, keep = float(z["threshold"]), float(z["keep"])
        return cls(
            classes=[str(c) for c in z["classes"]],
            means=z["means"],
            factor=z["factor"],
            shrinkage=float(z["shrinkage"]),
            threshold=None if np.isnan(threshold) else threshold,
            keep=None if np.isnan(keep) else keep,
        )
