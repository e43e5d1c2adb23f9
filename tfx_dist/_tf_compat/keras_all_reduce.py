"""Around Keras's gradient all-reduce: one row per id for some tables; accumulation refused clearly.

Replaces Keras's ``TFOptimizer._all_reduce_sum_gradients``, for tfx_dist's strategies.

One row per id. The reductions
concatenate the replicas' `tf.IndexedSlices`, as TensorFlow does: for
`keras.layers.Embedding` that is one device's gradient exactly (one row per
occurrence of an id, which Adam, Adagrad, RMSprop and FTRL square one by one).
A lookup that sums the rows of an id before its gradient leaves the layer
(`ShardedEmbedding`'s ``tf.unique``) has one row per distinct id of the global
batch on one device, but one per replica that saw the id once concatenated:
for a variable marked with `rows_summed_by_id`, the reduced rows are summed
per id again. Unmarked variables get Keras's result unchanged.

Keras's own gradient accumulation (an optimizer's ``gradient_accumulation_steps``)
all-reduces inside a ``tf.cond``: a synchronization point that no strategy with
several replicas in one process can reach from there (TensorFlow's fail with
"merge_call called while defining a new graph"). Under tfx_dist's strategies it
stops at once with an error that says what to write instead.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import errors
from tfx_dist._tf_compat import replacements

_MARK = "_tfx_rows_summed_by_id"


def rows_summed_by_id(variable) -> None:
    """Marks ``variable`` (a TensorFlow variable) as read by a lookup that sums rows per id."""
    replacements.install()
    setattr(variable, _MARK, True)


def merge_duplicate_rows(slices: tf.IndexedSlices) -> tf.IndexedSlices:
    """The same sum with one row per distinct index, in the order of first occurrence."""
    indices, position = tf.unique(tf.cast(slices.indices, tf.int64))
    rows = tf.math.unsorted_segment_sum(slices.values, position, tf.size(indices))
    return tf.IndexedSlices(rows, indices, slices.dense_shape)


def _merged_where_marked(grads_and_vars):
    return [(merge_duplicate_rows(g) if isinstance(g, tf.IndexedSlices) and getattr(v, _MARK, False)
             else g, v) for g, v in grads_and_vars]


def _check_no_accumulation(optimizer) -> None:
    strategy = tf.distribute.get_strategy()
    if (optimizer.gradient_accumulation_steps and strategy.num_replicas_in_sync > 1
            and type(strategy).__module__.startswith("tfx_dist.")):
        raise errors.UnimplementedError(
            f"{type(optimizer).__name__}(gradient_accumulation_steps="
            f"{optimizer.gradient_accumulation_steps}) under {type(strategy).__name__} with "
            f"{strategy.num_replicas_in_sync} replicas: Keras sums the replicas' gradients inside a "
            "tf.cond, which a strategy cannot synchronize (TensorFlow's strategies fail too). "
            "Accumulate by hand instead: sum each replica's gradients into variables created in "
            "strategy.scope() with synchronization=tf.VariableSynchronization.ON_READ and "
            "aggregation=tf.VariableAggregation.SUM, and every N steps call "
            "optimizer.apply_gradients on them inside strategy.run (docs/keras.md, \"Gradient "
            "accumulation\").")


def install() -> None:
    from keras.src.backend.tensorflow import optimizer as keras_tf_optimizer

    original = keras_tf_optimizer.TFOptimizer._all_reduce_sum_gradients

    def _all_reduce_sum_gradients(self, grads_and_vars):
        _check_no_accumulation(self)
        return _merged_where_marked(original(self, grads_and_vars))

    keras_tf_optimizer.TFOptimizer._all_reduce_sum_gradients = _all_reduce_sum_gradients
