"""Keras's shuffled NumPy input in one order on every worker: each example once per epoch.

A multi-worker strategy shards Keras's NumPy input by DATA: every worker builds
the whole global stream of batches and keeps its slice of each. That is right
only if every worker's stream is the same; Keras draws each epoch's
permutation with an unseeded ``tf.random.shuffle``, so with ``shuffle=True``
(its default) two workers trained on overlapping halves (49 distinct examples
of 64 in an epoch). `same_order_on_every_worker` rebuilds such a dataset with
the permutation drawn from a seed the workers share (the chief's), new each
epoch, the same on every worker: each new iterator draws the next value of a
seeded ``tf.data.Dataset.random``, which advances identically everywhere.
``shuffle="batch"`` (rows shuffled within each batch) gets the same treatment.

Each epoch's order is a function of that seed and the epoch's number alone
(`EpochOrder`), so a run that resumes from a checkpoint recomputes it: the
checkpoint keeps the seed, and the resumed run sets the epoch its next
iterator shuffles for (`tfx_dist.fault_tolerance`). A `tf.data` pipeline that
reshuffles each iteration with seeds follows from them and from the
iterators it made before: a resume makes as many (`skip_iterators`); one
without seeds is random in every process, and a resume says so
(`latest_reshuffles`).
"""

from __future__ import annotations

import random
import threading
from typing import Callable

import tensorflow as tf

from tfx_dist import _tf_compat as tfc


class EpochOrder:
    """The order of one shuffled array input: its seed (the chief's) and the epoch whose order
    its next iterator draws (counted from 0; a resumed run sets it)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.epoch = 0
        self._lock = threading.Lock()  # tf.data calls `_next` from its own threads

    def _next(self):
        with self._lock:
            epoch, self.epoch = self.epoch, self.epoch + 1
            return tf.constant([epoch, self.seed], tf.int64)


# What the latest dataset distributed in this process (fit's, when its callbacks start) shuffles
# by: its EpochOrder (Keras's shuffled arrays), or its reshuffling tf.data shuffles.
_latest: dict = {"order": None, "dataset": None, "reshuffling": ()}


def latest_order() -> EpochOrder | None:
    """The `EpochOrder` of the latest dataset distributed here, if it is Keras's shuffled arrays."""
    return _latest["order"]


def latest_reshuffles() -> str | None:
    """None, or how the latest dataset distributed here reshuffles each iteration (`tf.data`):
    ``"seeded"`` (each epoch's order follows from the seeds and the iterations before it) or
    ``"unseeded"`` (random in every process)."""
    shuffles = _latest["reshuffling"]
    if not shuffles:
        return None
    return "seeded" if all(_seeded(node) for node in shuffles) else "unseeded"


def skip_iterators(count: int) -> None:
    """Makes the latest dataset's next iterator shuffle as its ``count + 1``-th would: iterators
    made and dropped advance its shuffles' seeds (shared with its distributed copies)."""
    if latest_reshuffles() == "seeded":
        for _ in range(count):
            iter(_latest["dataset"])


def same_order_on_every_worker(dataset: tf.data.Dataset,
                               chief_value: Callable[[int], int]) -> tf.data.Dataset:
    """``dataset`` itself, or, if it is Keras's shuffled NumPy input, the same batches in an
    order drawn from the chief's seed. ``chief_value(x)`` returns the chief's ``x`` on every
    worker (every worker calls it for the same datasets, in the same order)."""
    source = tfc.shuffled_array_input(dataset)
    _latest.update(order=None, dataset=dataset, reshuffling=() if source else _reshuffling(dataset))
    if source is None:
        return dataset
    order = EpochOrder(chief_value(random.randrange(1, 2**62)))
    _latest["order"] = order
    batches = _index_batches(source.num_samples, source.batch_size, source.shuffle, order)
    arrays = tf.data.Dataset.from_tensors(source.arrays).repeat()
    rebuilt = tf.data.Dataset.zip((batches, arrays)).map(
        _plain(lambda indices, data: tfc.gather_rows(data, indices)),
        num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()  # Keras's: no graph rewrites, sharded by DATA
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return rebuilt.with_options(options).prefetch(tf.data.AUTOTUNE)


def _reshuffling(dataset: tf.data.Dataset) -> tuple:
    """The ``shuffle(..., reshuffle_each_iteration=True)`` steps of ``dataset``'s pipeline: its
    order in an epoch depends on how many iterators it made before."""
    found, pending, seen = [], [dataset], set()
    while pending:
        node = pending.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if getattr(node, "_reshuffle_each_iteration", False) is True:
            found.append(node)
        inputs = getattr(node, "_inputs", None)
        pending.extend(inputs() if callable(inputs) else ())
    return tuple(found)


def _seeded(shuffle) -> bool:
    # Seeds (0, 0): TensorFlow draws random ones (no op seed and no global seed was set).
    seeds = [getattr(shuffle, name, None) for name in ("_seed", "_seed2")]
    return all(seed is not None for seed in seeds) and any(int(seed) != 0 for seed in seeds)


def _index_batches(num_samples: int, batch_size: int, shuffle, order: EpochOrder) -> tf.data.Dataset:
    """Batches of example numbers, in an order that depends only on the seed and the epoch."""
    full = num_samples // batch_size * batch_size
    # Read once per iterator (epoch), in Python: the epoch and the seed are state a resume sets.
    epoch_and_seed = tf.data.Dataset.from_tensors(0).map(
        _plain(lambda _: tf.ensure_shape(tf.py_function(order._next, [], tf.int64), [2])))

    def shuffled(values, seed):
        return tf.random.experimental.stateless_shuffle(values, seed=seed)

    def batches_of(permutation):
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(permutation[:full], [-1, batch_size]))
        if full < num_samples:
            batches = batches.concatenate(tf.data.Dataset.from_tensors(permutation[full:]))
        return batches

    if shuffle == "batch":  # each batch its own seed: (the epoch's batch number, the seed)
        in_order = batches_of(tf.range(num_samples, dtype=tf.int64))
        per_batch = (num_samples + batch_size - 1) // batch_size

        def epoch_batches(epoch_seed):
            return in_order.enumerate().map(_plain(lambda i, batch: shuffled(
                batch, tf.stack([epoch_seed[0] * per_batch + i, epoch_seed[1]]))))
        return epoch_and_seed.flat_map(_plain(epoch_batches))
    return epoch_and_seed.map(
        _plain(lambda epoch_seed: shuffled(tf.range(num_samples, dtype=tf.int64), epoch_seed))).flat_map(
            _plain(batches_of))


def _plain(fn):
    # No autograph: nothing to convert, and no generated file left in TMPDIR.
    return tf.autograph.experimental.do_not_convert(fn)
