"""What a scoring run is asked to do (``ScoreOptions``), its one error type, and the labels it checks.

No pyarrow here: ``import router.score`` works on the runtime install; reading and writing need the
``scale`` extra.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass


class ScoreError(ValueError):
    """The input or output cannot be used; the message says why and where."""


@dataclass
class ScoreOptions:
    role: str = "viewer"
    text_column: str = "text"
    label_column: str = "label"
    id_column: str | None = None
    context_column: str | None = None  # the previous message of a conversation, when the log has it
    with_labels: bool = False  # check each row's label against the model's and write it beside the decision
    skip_invalid: bool = False  # invalid rows get an 'error' and no decision, instead of stopping the run
    keep_text: bool = False
    model_dir: str | None = None
    config: str | None = None
    threshold: float | None = None
    chunk_rows: int = 2048  # rows per part file (and per route_batch call locally)

    def fingerprint(self) -> dict:
        d = asdict(self)
        d.pop("chunk_rows")  # changing the chunk size does not change any decision
        d.pop("skip_invalid")
        return d


@functools.lru_cache(maxsize=8)
def model_labels(model_dir: str | None) -> tuple[str, ...]:
    """The labels of the model that scores (its manifest's)."""
    from router.manifest import load_manifest
    from router.shipped import default_model_dir

    return tuple(load_manifest(model_dir or default_model_dir()).labels)
