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
            return tf.gather(self.embeddings, unique_ids)
