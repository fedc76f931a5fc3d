"""The golden set a model must pass before it serves: labelled messages routed at load and at every reload.

A model whose files match its manifest can still be wrong: retrained on bad rows, or its weights
scrambled and the manifest's sha256 written again. The canary message only shows that it classifies.
The golden set shows that it classifies right: the model's top label must be the row's label for at least
``golden_min_accuracy`` of its messages, and, at a reload, the serving model's top label for at least
``golden_min_agreement`` of them. A model that falls short is refused with the figures.

The packaged set (router/config/golden.jsonl: 40 plain requests of the five shipped intents and small
talk, none of them a corpus row) applies to a model whose labels hold all of its labels; a model of other
intents names its own with ``serve --golden FILE`` (JSONL rows of ``text`` and ``label``), or none.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

PACKAGED = Path(__file__).resolve().parent.parent / "config" / "golden.jsonl"
log = logging.getLogger("intent_router.serve")


class GoldenSetError(RuntimeError):
    """A model that routes the golden set worse than the floors allow."""


@dataclass(frozen=True)
class GoldenSet:
    path: str
    texts: tuple[str, ...]
    labels: tuple[str, ...]


def load_golden(path: str | Path) -> GoldenSet:
    """A golden set file: JSONL rows with a non-empty ``text`` and a ``label``; ValueError names the line."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                text, label = row["text"], row["label"]
            except (ValueError, KeyError, TypeError):
                raise ValueError(
                    f"{path}:{n}: a golden row is a JSON object with 'text' and 'label'"
                ) from None
            if not isinstance(text, str) or not text.strip() or not isinstance(label, str):
                raise ValueError(f"{path}:{n}: 'text' must be a non-empty string and 'label' a string")
            texts.append(text)
            labels.append(label)
    if not texts:
        raise ValueError(f"{path}: the golden set has no rows")
    return GoldenSet(str(path), tuple(texts), tuple(labels))


def golden_for(path: str | Path | None, labels) -> GoldenSet | None:
    """The golden set a model is checked on: ``path`` when given (its labels must be the model's), else
    the packaged one when the model has all of its labels, else none."""
    golden = load_golden(path if path is not None else PACKAGED)
    missing = sorted(set(golden.labels) - set(labels))
    if missing and path is not None:
        raise ValueError(f"golden set {path}: labels {missing} are not the model's")
    return None if missing else golden


def check_golden(router, golden: GoldenSet, min_accuracy: float, serving=None, min_agreement=0.0) -> dict:
    """Read the golden set with ``router``'s classifier (and ``serving``'s, the model it would replace);
    raise GoldenSetError below a floor, else return the figures. The model's top label is judged, not
    the routed Decision: the server's threshold, verifier and decision log play no part in the check."""
    tops = _top_labels(router, golden.texts)
    right = sum(t == label for t, label in zip(tops, golden.labels, strict=True))
    n = len(golden.texts)
    figures = {"golden_set": golden.path, "messages": n, "accuracy": round(right / n, 4)}
    if right / n < min_accuracy:
        raise GoldenSetError(
            f"golden set {golden.path}: {right} of {n} messages read right ({right / n:.2f}), "
            f"below the floor {min_accuracy:g}"
        )
    if serving is not None:
        same = sum(a == b for a, b in zip(tops, _top_labels(serving, golden.texts), strict=True))
        figures["agreement"] = round(same / n, 4)
        if same / n < min_agreement:
            raise GoldenSetError(
                f"golden set {golden.path}: {same} of {n} messages read as the serving model reads them "
                f"({same / n:.2f}), below the floor {min_agreement:g}"
            )
    log.info("golden set: %s", figures)
    return figures


def _top_labels(router, texts) -> list[str]:
    clf = router.classifier
    return [clf.labels[i] for i in clf.predict_proba(list(texts)).argmax(axis=1)]
