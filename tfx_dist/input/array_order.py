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

A resume recomputes those orders: iterator i of the dataset shuffles with the
seed ``[draw_i, job seed]``, where draw_i depends on i alone (a
``Dataset.random`` of a fixed seed, drawn when the iterator is made, never
racing with prefetching) and the job seed is read when the iterator starts
(`InputOrder`: the checkpoint keeps it, a restore sets it back). The resumed
run makes and drops as many iterators as the saved run had made before its
epoch (`skip_iterators`), so its epoch's iterator has the same i. A `tf.data`
pipeline that reshuffles each iteration with seeds works the same way (its
seeds advance per iterator); one without seeds is random in every process,
and a resume says so (`latest_reshuffles`).
"""

from __future__ import annotations

import random
from typing import Callable

import tensorflow as tf

from tfx_dist import _tf_compat as tfc


class InputOrder:
    """The job seed of one shuffled array input (the chief's; a restore sets the saved one)."""

    def __init__(self, seed: int):
        self.seed = seed

    def _read(self):
        return tf.constant(self.seed, tf.int64)


_DRAWS_SEED = 0x7F3A  # fixed: draw i is the same in every run (the job seed varies instead)

# What the latest dataset distributed in this process (fit's, when its callbacks start) shuffles
# by: its InputOrder (Keras's shuffled arrays), or its reshuffling tf.data shuffles.
_latest: dict = {"order": None, "dataset": None, "reshuffling": ()}


def latest_order() -> InputOrder | None:
    """The `InputOrder` of the latest dataset distributed here, if it is Keras's shuffled arrays."""
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
    if _latest["order"] is not None or latest_reshuffles() == "seeded":
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
    order = InputOrder(chief_value(random.randrange(1, 2**62)))
    batches = _index_batches(source.num_samples, source.batch_size, source.shuffle, order)
    _latest.update(order=order, dataset=batches)  # its iterators advance the rebuilt one's draws
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
        if tfc.reshuffles_each_iteration(node):
            found.append(node)
        pending.extend(tfc.dataset_inputs(node))
    return tuple(found)


def _seeded(shuffle) -> bool:
    # Seeds (0, 0): TensorFlow draws random ones (no op seed and no global seed was set).
    seeds = tfc.shuffle_seeds(shuffle)
    return all(seed is not None for seed in seeds) and any(int(seed) != 0 for seed in seeds)


def _index_batches(num_samples: int, batch_size: int, shuffle, order: InputOrder) -> tf.data.Dataset:
    """Batches of example numbers, in an order that depends only on the job seed and on how many
    iterators the dataset made before."""
    full = num_samples // batch_size * batch_size
    # One draw per iterator, when it is made: a random dataset of a fixed seed advances alike on
    # every worker and in every run; the job seed joins it when the iterator starts.
    draws = tf.data.Dataset.random(seed=_DRAWS_SEED, rerandomize_each_iteration=True)
    job_seed = tf.data.Dataset.from_tensors(0).map(
        _plain(lambda _: tf.ensure_shape(tf.py_function(order._read, [], tf.int64), [])))

    def shuffled(values, draw, seed):
        return tf.random.experimental.stateless_shuffle(values, seed=tf.stack([draw, seed]))

    def batches_of(permutation):
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(permutation[:full], [-1, batch_size]))
        if full < num_samples:
            batches = batches.concatenate(tf.data.Dataset.from_tensors(permutation[full:]))
        return batches

    if shuffle == "batch":
        in_order = batches_of(tf.range(num_samples, dtype=tf.int64))
        return tf.data.Dataset.zip((in_order, draws, job_seed.repeat())).map(_plain(shuffled))
    return tf.data.Dataset.zip((draws.take(1), job_seed)).map(
        _plain(lambda draw, seed: shuffled(tf.range(num_samples, dtype=tf.int64), draw, seed))).flat_map(
            _plain(batches_of))


def _plain(fn):
    # No autograph: nothing to convert, and no generated file left in TMPDIR.
    return tf.autograph.experimental.do_not_convert(fn)
