"""Where an elastic job is in its data: one position per epoch, shared by every rank.

The position is counted in examples of the epoch's order that the whole job
has consumed (``processed``), not in batches of one rank: the ranks read the
examples not yet consumed, interleaved (rank r of n takes the r-th, (r+n)-th,
... of them), so after k steps of b examples per rank the job has consumed
exactly the first k*b*n. After a reset the survivors restore the committed
position and split what remains of the epoch among themselves, whatever their
number: no example of the epoch is lost, and the only ones seen twice are
those of the steps since the last commit.

Keep the sampler in the state (``ObjectState(sampler=ElasticSampler(n))``), so
that a commit saves its position and a sync gives every rank rank 0's.
"""

from __future__ import annotations

import numpy as np


class ElasticSampler:
    """The order of one epoch's examples and how many of them the job has consumed.

    Args:
      num_examples: examples in one epoch.
      shuffle: a new order each epoch (from ``seed`` and the epoch, the same on every rank).
      seed: the order's seed.
    """

    def __init__(self, num_examples: int, shuffle: bool = True, seed: int = 0):
        if num_examples < 1:
            raise ValueError(f"Expected num_examples >= 1. Received: num_examples={num_examples}")
        self.num_examples, self.shuffle, self.seed = int(num_examples), bool(shuffle), int(seed)
        self.epoch, self.processed = 0, 0

    def order(self) -> np.ndarray:
        """This epoch's order of the example indices."""
        if not self.shuffle:
            return np.arange(self.num_examples)
        return np.random.default_rng([self.seed, self.epoch]).permutation(self.num_examples)

    def remaining(self) -> int:
        return self.num_examples - self.processed

    def steps(self, batch_size: int, size: int) -> int:
        """Steps left in this epoch at ``batch_size`` examples per rank over ``size`` ranks (the
        last may be short; fewer than ``size`` examples left over are not a step)."""
        left = self.remaining()
        full, rest = divmod(left, batch_size * size)
        return full + (1 if rest >= size else 0)

    def indices(self, rank: int, size: int, batch_size: int) -> np.ndarray:
        """The indices rank ``rank`` of ``size`` reads for the rest of this epoch, in order: its
        ``steps(batch_size, size)`` batches of ``batch_size`` (the last may be short)."""
        if not 0 <= rank < size:
            raise ValueError(f"Expected 0 <= rank < size. Received: rank={rank}, size={size}")
        left = self.order()[self.processed:]
        steps = self.steps(batch_size, size)
        used = min(len(left), steps * batch_size * size)
        used -= used % size  # every rank the same number of examples at each step
        return left[:used][rank::size]

    def record_batch(self, batch_size: int, size: int) -> None:
        """One step of the job consumed: ``batch_size`` examples on each of ``size`` ranks (fewer
        at the end of the epoch)."""
        step = batch_size * size
        left = self.remaining()
        self.processed += step if left >= step else left - left % size

    def set_epoch(self, epoch: int) -> None:
        """Starts epoch ``epoch`` at its first example."""
        self.epoch, self.processed = int(epoch), 0

    def __repr__(self):
        return (f"ElasticSampler(num_examples={self.num_examples}, epoch={self.epoch}, "
                f"processed={self.processed})")
