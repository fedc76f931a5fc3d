"""Length-bucketed contrastive batches: every pair once per epoch, by the seed, with less padding."""

import numpy as np
from datasets import Dataset

from training.fit.batching import LengthBucketBatchSampler


def _pairs(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    words = lambda: " ".join("w" * int(rng.integers(1, 8)) for _ in range(int(rng.integers(1, 40))))  # noqa: E731
    return Dataset.from_dict(
        {
            "sentence_1": [words() for _ in range(n)],
            "sentence_2": [words() for _ in range(n)],
            "label": [1.0] * n,
        }
    )


def test_every_pair_once_and_reproducible():
    ds = _pairs()
    s = LengthBucketBatchSampler(ds, batch_size=32, drop_last=False, seed=7, window=8)
    batches = list(s)
    assert len(batches) == len(s) == 32
    assert sorted(i for b in batches for i in b) == list(range(len(ds)))
    assert batches == list(LengthBucketBatchSampler(ds, batch_size=32, drop_last=False, seed=7, window=8))
    s.set_epoch(1)
    assert list(s) != batches  # a new order each epoch


def test_less_padding_than_random_batches():
    ds = _pairs()
    lengths = np.maximum([len(t) for t in ds["sentence_1"]], [len(t) for t in ds["sentence_2"]])
    padded = lambda batches: sum(len(b) * lengths[b].max() for b in batches)  # noqa: E731
    bucketed = [np.array(b) for b in LengthBucketBatchSampler(ds, batch_size=32, drop_last=False, seed=1)]
    order = np.random.default_rng(1).permutation(len(ds))
    random = [order[i : i + 32] for i in range(0, len(ds), 32)]
    assert padded(bucketed) < 0.75 * padded(random)
    assert len({len(b) for b in bucketed[:-1]}) <= 2  # full batches, at most one short one per window


def test_drop_last_keeps_only_full_batches():
    s = LengthBucketBatchSampler(_pairs(100), batch_size=32, drop_last=True, seed=0, window=2)
    assert len(s) == 3 and all(len(b) == 32 for b in s)
