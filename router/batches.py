"""How the classifier cuts a batch of messages into graph runs: length-sorted batches that keep padding
short (``length_batches``), the graph's inputs for one run (``graph_inputs``), and the check that a batch
is a sequence of strings."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# a batch's padded size: past a few hundred tokens a batch runs slower per message than smaller ones (the
# long tail of lengths pads every row to the longest); docs/speed.md has the measurements
DEFAULT_MAX_TOKENS = 512
# what one more graph run costs, in padded tokens: a run of up to 128 padded tokens takes about a + b * tokens,
# and a / b measured 17 on the shipped 6-layer int8 graph and 13 on a 3-layer student (docs/speed.md)
RUN_COST_TOKENS = 16


def length_batches(
    order: list[int], lengths: list[int], max_rows: int, max_tokens: int, run_cost: int = RUN_COST_TOKENS
) -> list[list[int]]:
    """``order`` (indices sorted by length) cut into batches of at most ``max_rows`` rows and, padded to
    their longest row, ``max_tokens`` tokens (a batch always takes at least one row), at the cuts that
    minimise the padded tokens plus ``run_cost`` per batch (dynamic programming over the sorted rows)."""
    widths = [lengths[i] for i in order]
    n = len(widths)
    best = [0.0] + [math.inf] * n  # best[j]: cost of the first j rows
    start = [0] * (n + 1)
    for j in range(1, n + 1):
        width = widths[j - 1]  # the longest row of any batch that ends at row j - 1
        for i in range(j - 1, max(j - 1 - max_rows, -1), -1):
            rows = j - i
            if rows > 1 and rows * width > max_tokens:
                break
            cost = best[i] + run_cost + rows * width
            if cost < best[j]:
                best[j], start[j] = cost, i
    out: list[list[int]] = []
    j = n
    while j > 0:
        out.append(order[start[j] : j])
        j = start[j]
    return out[::-1]


def check_texts(texts: Sequence[str]) -> None:
    if isinstance(texts, str):
        raise TypeError(
            "expected a sequence of strings, got one str: use classify(text) for a single message"
        )
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise TypeError(f"message {i} is {type(t).__name__}, expected str")


def graph_inputs(encs: list, idx: list[int], lengths: list[int]) -> dict[str, np.ndarray]:
    """The graph's inputs for the messages ``idx`` (sorted by length), padded to the longest. The tokenizer
    pads nothing, so a message's attention mask is ones over its own tokens."""
    if len(idx) == 1:  # no padding: the arrays straight from the encoding
        ids = np.asarray([encs[idx[0]].ids], dtype=np.int64)
        return {"input_ids": ids, "attention_mask": np.ones(ids.shape, dtype=np.int64)}
    width = lengths[idx[-1]]
    ids = np.zeros((len(idx), width), dtype=np.int64)
    mask = np.zeros((len(idx), width), dtype=np.int64)
    for row, i in enumerate(idx):
        ids[row, : lengths[i]] = encs[i].ids
        mask[row, : lengths[i]] = 1
    return {"input_ids": ids, "attention_mask": mask}


def check_route_arguments(texts: Sequence[str], role: str, context: str | None) -> None:
    """route_batch's arguments: a sequence of texts (not one str), a role and, if any, a previous message."""
    if context is not None and not isinstance(context, str):
        raise TypeError(f"context must be the previous message as a str, got {type(context).__name__}")
    if isinstance(texts, str):
        raise TypeError("route_batch takes a sequence of strings; use route(text, role) for one message")
    if not isinstance(role, str):
        raise TypeError(f"role must be a str, got {type(role).__name__}")
