"""Length-bucketed batches for the contrastive phase.

Our messages are short (median 15 tokens) but a random batch of 32 pairs pads to its longest message
(about 50 tokens), so two thirds of the encoder's work is padding. Batches drawn from a shuffled
window and sorted by length inside it pad little; the batch order is shuffled again, so each step
still sees a random mix of labels and pairs. The windows and the order follow the seed.
"""

from __future__ import annotations

import math

import numpy as np
from torch.utils.data import BatchSampler


class LengthBucketBatchSampler(BatchSampler):
    """Batches of pairs with similar lengths: shuffle, cut windows of ``window`` batches, sort each
    window by the longer text of a pair, cut batches, shuffle the batches."""

    def __init__(self, dataset, batch_size: int, drop_last: bool, seed: int = 0, window: int = 64, **_):
        columns = [c for c in dataset.column_names if c != "label"]
        self.lengths = np.max([[len(t) for t in dataset[c]] for c in columns], axis=0)
        self.batch_size, self.drop_last, self.seed, self.window = batch_size, drop_last, seed, window
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __len__(self) -> int:
        n = len(self.lengths)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def __iter__(self):
        rng = np.random.default_rng((self.seed, self.epoch))
        order = rng.permutation(len(self.lengths))
        span = self.batch_size * self.window
        batches = []
        for start in range(0, len(order), span):
            chunk = order[start : start + span]
            chunk = chunk[np.argsort(self.lengths[chunk], kind="stable")]
            batches += [chunk[i : i + self.batch_size] for i in range(0, len(chunk), self.batch_size)]
        if self.drop_last:
            batches = [b for b in batches if len(b) == self.batch_size]
        for i in rng.permutation(len(batches)):
            yield batches[i].tolist()
