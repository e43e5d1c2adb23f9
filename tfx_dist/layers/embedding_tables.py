"""Where a `ShardedEmbedding`'s rows live.

A table object has one method the layer calls, ``lookup(unique_ids)``, which
returns the rows of distinct int64 ids, differentiably: the gradient of the
rows reaches the table's optimizer. `create` picks the table for the strategy
in scope: a strategy that holds tables itself (parameter servers) provides
``extended.create_embedding_table(layer)``; any other strategy, or none, gets
a `LocalTable`.
"""

from __future__ import annotations

import tensorflow as tf


def create(layer):
    """The table for ``layer`` under the strategy in scope."""
    extended = tf.distribute.get_strategy().extended
    factory = getattr(extended, "create_embedding_table", None)
    if factory is not None:
        return factory(layer)
    if layer.input_dim is None:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' has input_dim=None (a dynamic table: any int64 id, "
            "rows created on first lookup), which only parameter servers provide. Build the "
            "model under tfx_dist.ParameterServerStrategy, or give input_dim.")
    return LocalTable(layer)


def anchored_lookup(anchor, unique_ids, fetch_rows, dense_shape):
    """The rows of distinct ids from ``fetch_rows(ids)``, differentiable through ``anchor``.

    For tables whose rows live outside Keras's variables (on parameter
    servers, or sharded over the workers): the lookup reads the scalar
    ``anchor`` variable, so its gradient, a `tf.IndexedSlices` of the rows'
    gradient over ``ids`` (``dense_shape``), reaches the optimizer, where the
    strategy takes it out (`split_table_gradients`).
    """
    @tf.custom_gradient
    def fetch(ids):
        rows = fetch_rows(ids)
        # Reading the anchor here is what makes it one of the function's
        # variables (its gradient comes from grad below); the rows need not
        # depend on its value, so no arithmetic over them (a copy of the batch).
        with tf.control_dependencies([tf.convert_to_tensor(anchor.value)]):
            rows = tf.identity(rows)

        def grad(d_rows, variables=None):
            slices = tf.IndexedSlices(d_rows, ids, dense_shape=dense_shape)
            return None, [slices] * len(variables or [])

        return rows, grad

    return fetch(tf.cast(unique_ids, tf.int64))


def split_table_gradients(grads, variables, attribute: str):
    """([(table, gradient)] of the anchors marked with ``attribute``, other grads, other vars).

    An anchor with no gradient (its table unused by the loss) is left out.
    """
    tables, rest_grads, rest_vars = [], [], []
    for grad, var in zip(grads, variables):
        table = getattr(var, attribute, None)
        if table is None:
            rest_grads.append(grad)
            rest_vars.append(var)
        elif grad is not None:
            tables.append((table, grad))
    return tables, rest_grads, rest_vars


class LocalTable:
    """The whole table in one Keras variable, trained by the model's optimizer.

    The gradient of a lookup is a `tf.IndexedSlices` over the distinct ids, so
    Keras's optimizers update only the rows the batch used (their slots,
    like the table, are dense).
    """

    def __init__(self, layer):
        self.name = layer.name
        self.input_dim = layer.input_dim
        self.embeddings = layer.add_weight(
            shape=(layer.input_dim, layer.output_dim), initializer=layer.embeddings_initializer,
            name="embeddings", trainable=True)

    def lookup(self, unique_ids):
        checks = [
            tf.debugging.assert_non_negative(
                unique_ids, message=f"ShardedEmbedding '{self.name}': ids must be >= 0"),
            tf.debugging.assert_less(
                unique_ids, tf.constant(self.input_dim, tf.int64),
                message=f"ShardedEmbedding '{self.name}': ids must be < input_dim "
                        f"({self.input_dim})"),
        ]
        with tf.control_dependencies(checks):
            return tf.gather(self.embeddings.value, unique_ids)
