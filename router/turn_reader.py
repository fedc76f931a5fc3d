"""The turn reader: what a message that follows a request is (data/INTENTS.md, "In a conversation").

After a turn, a message that is not sure of its own intent is one of three kinds: a *continuation* of the
conversation ("yes, do it", "only the EU ones", "the second one"), which takes the conversation's intents;
*social* (thanks, a reaction, a farewell), which stays out of scope; or a request of its *own*, read by
its own classification. The model's softmax head learns continuations and small talk from single rows; the
turn reader is a second softmax head, fitted on follow-ups written after a request
(data/conversations/train.jsonl, by training.fit.turn_reading) and on the training rows, over what the
message's own graph run already gives: its sentence embedding and the log of its calibrated probabilities.
It runs only for a message read after a turn, as one small matrix product on that run's outputs: a message
with no previous turn costs nothing more. The manifest's ``conversation`` section names its file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from router.manifest import TurnReaderSpec, verify_file

KINDS = ("continuation", "social", "own")
FILE = "turn_reader.npz"
_FLOOR = 1e-6  # the smallest probability whose log is a feature


def turn_features(embeddings: np.ndarray, probabilities: np.ndarray) -> np.ndarray:
    """The reader's input, one row per message: the sentence embedding, then the log probabilities."""
    emb = np.asarray(embeddings, dtype=np.float64).reshape(len(probabilities), -1)
    logp = np.log(np.clip(np.asarray(probabilities, dtype=np.float64), _FLOOR, 1.0))
    return np.hstack([emb, logp])


@dataclass(frozen=True)
class TurnReader:
    coef: np.ndarray  # (kinds, features)
    intercept: np.ndarray  # (kinds,)

    @classmethod
    def load(cls, model_dir: str | Path, spec: TurnReaderSpec) -> TurnReader:
        """The head in ``spec.file``, its sha256 checked; its width must be the embedding's plus the
        labels' (the model's own), and its rows the KINDS."""
        head = np.load(verify_file(Path(model_dir), spec.file))
        coef, intercept = head["coef"].astype(np.float64), head["intercept"].astype(np.float64)
        if list(spec.kinds) != list(KINDS) or coef.shape != (len(KINDS), spec.features):
            raise ValueError(
                f"{spec.file.path}: a turn reader of kinds {list(KINDS)} over {spec.features} features was "
                f"expected, got kinds {spec.kinds} and weights of shape {coef.shape}"
            )
        return cls(coef, intercept)

    def read(self, embeddings: np.ndarray, probabilities: np.ndarray) -> list[dict[str, float]]:
        """Each message's probability of being each kind (KINDS)."""
        z = turn_features(embeddings, probabilities) @ self.coef.T + self.intercept
        z = np.exp(z - z.max(axis=1, keepdims=True))
        p = z / z.sum(axis=1, keepdims=True)
        return [dict(zip(KINDS, row, strict=True)) for row in p.tolist()]


def kind_of(turn: dict[str, float]) -> tuple[str, float]:
    """The most probable kind of a turn reading, and its probability."""
    kind = max(KINDS, key=lambda k: turn.get(k, 0.0))
    return kind, turn.get(kind, 0.0)
