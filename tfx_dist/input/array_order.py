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
"""

from __future__ import annotations

import random
from typing import Callable

import tensorflow as tf

from tfx_dist import _tf_compat as tfc


def same_order_on_every_worker(dataset: tf.data.Dataset,
                               chief_value: Callable[[int], int]) -> tf.data.Dataset:
    """``dataset`` itself, or, if it is Keras's shuffled NumPy input, the same batches in an
    order drawn from the chief's seed. ``chief_value(x)`` returns the chief's ``x`` on every
    worker (every worker calls it for the same datasets, in the same order)."""
    source = tfc.shuffled_array_input(dataset)
    if source is None:
        return dataset
    seed = chief_value(random.randrange(1, 2**62))
    batches = _index_batches(source.num_samples, source.batch_size, source.shuffle, seed)
    arrays = tf.data.Dataset.from_tensors(source.arrays).repeat()
    rebuilt = tf.data.Dataset.zip((batches, arrays)).map(
        _plain(lambda indices, data: tfc.gather_rows(data, indices)),
        num_parallel_calls=tf.data.AUTOTUNE)
    options = tf.data.Options()  # Keras's: no graph rewrites, sharded by DATA
    options.experimental_optimization.apply_default_optimizations = False
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return rebuilt.with_options(options).prefetch(tf.data.AUTOTUNE)


def _index_batches(num_samples: int, batch_size: int, shuffle, seed: int) -> tf.data.Dataset:
    """Batches of example numbers, in an order that depends only on ``seed`` and the epoch."""
    full = num_samples // batch_size * batch_size
    # One draw per iterator (epoch): a seeded random dataset advances alike on every worker.
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)

    def shuffled(values, draw):
        return tf.random.experimental.stateless_shuffle(values, seed=tf.stack([draw, seed]))

    def batches_of(order):
        batches = tf.data.Dataset.from_tensor_slices(tf.reshape(order[:full], [-1, batch_size]))
        if full < num_samples:
            batches = batches.concatenate(tf.data.Dataset.from_tensors(order[full:]))
        return batches

    if shuffle == "batch":
        in_order = batches_of(tf.range(num_samples, dtype=tf.int64))
        return tf.data.Dataset.zip((in_order, draws)).map(_plain(shuffled))
    return draws.take(1).map(
        _plain(lambda draw: shuffled(tf.range(num_samples, dtype=tf.int64), draw))).flat_map(
            _plain(batches_of))


def _plain(fn):
    # No autograph: nothing to convert, and no generated file left in TMPDIR.
    return tf.autograph.experimental.do_not_convert(fn)
