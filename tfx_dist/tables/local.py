"""A table in one Keras variable (no strategy, or replicated), and choosing a layer's table.

`create` picks the table for the strategy in scope: a strategy that holds
tables itself is a `protocol.TableHost`; any other strategy, or none, gets a
`LocalTable`.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.tables import keras_file, protocol
from tfx_dist.tables.placement import Placement


def create(layer):
    """The table for ``layer`` under the strategy in scope."""
    strategy = tf.distribute.get_strategy()
    host = protocol.host_in_scope(strategy)
    if host is not None:
        return host.create_embedding_table(layer)
    if layer.input_dim is None:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' has input_dim=None (a dynamic table: any int64 id, "
            "rows created on first lookup), which only parameter servers provide. Build the "
            "model under tfx_dist.ParameterServerStrategy, or give input_dim.")
    placement = Placement.LOCAL if strategy.num_replicas_in_sync == 1 else Placement.REPLICATED
    return LocalTable(layer, placement)


class LocalTable:
    """The whole table in one Keras variable, trained by the model's optimizer.

    The gradient of a lookup is a `tf.IndexedSlices` over the distinct ids, so
    Keras's optimizers update only the rows the batch used (their slots,
    like the table, are dense).
    """

    def __init__(self, layer, placement: Placement = Placement.LOCAL):
        self.name = layer.name
        self.input_dim = layer.input_dim
        self.dim = layer.output_dim
        self.placement = placement
        self.embeddings = layer.add_weight(
            shape=(layer.input_dim, layer.output_dim), initializer=layer.embeddings_initializer,
            name="embeddings", trainable=True)
        if placement == Placement.REPLICATED:  # one device has one gradient row per distinct id
            tfc.rows_summed_by_id(self.embeddings.value)

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

    def save_to_keras_store(self, store) -> None:
        """The rows, no slots (Keras's optimizer saves its own)."""
        dataset = keras_file.create(store, self.name, self.input_dim, (1, self.dim))
        rows = self.embeddings.numpy()
        keras_file.write_strided(dataset, lambda ids: rows[ids][:, None, :], 0, 1)

    def load_from_keras_store(self, store) -> None:
        """The rows of a file of any placement (their slots, if any, are not Keras's)."""
        dataset, _, _ = keras_file.open_records(store, self.name, self.dim)
        keras_file.check_rows(dataset, self.name, self.input_dim, dataset.shape[1] - 1)
        rows = np.empty((self.input_dim, self.dim), np.float32)

        def write(ids, records):
            rows[ids] = records[:, 0]

        keras_file.read_strided(dataset, write, 0, 1)
        self.embeddings.assign(rows)
