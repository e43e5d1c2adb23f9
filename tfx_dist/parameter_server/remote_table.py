"""A `ShardedEmbedding`'s table on the parameter servers.

Rows are fetched by the ``TfxPsLookup`` op; their gradient reaches the
servers through Keras's own optimizer call. The lookup reads a scalar
*anchor* variable inside a `tf.custom_gradient`, whose gradient for the
anchor is a `tf.IndexedSlices` over the batch's distinct ids. Keras hands
the anchor's gradient, with the current learning rate, to the optimizer's
update step, where the strategy pushes it to the servers instead
(`ParameterServerExtended.push_table_gradients`). Nothing of the table's
size exists on a worker.
"""

from __future__ import annotations

import ctypes

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist.embedding import store
from tfx_dist.parameter_server import _native

# A dense shape for the anchor's gradient: the rows it names are ids, not
# positions in a variable of that size (dynamic tables have no size).
_ID_SPACE = 1 << 62


def _ops_lib():
    return _ops.load_op_library("_ps_ops")


class RemoteTable:
    """The table of one `ShardedEmbedding` layer, sharded over the parameter servers."""

    def __init__(self, layer, client_id: int, table_id: int):
        self.name = layer.name
        self.dim = layer.output_dim
        self.table_id = table_id
        self._client_id = client_id
        self._optimizer = None  # the store optimizer last sent to the servers
        try:
            initializer = store.initializer_from_keras(layer.embeddings_initializer)
        except ValueError as e:
            raise ValueError(f"ShardedEmbedding '{layer.name}': {e}") from None
        seed = layer.embeddings_initializer.get_config().get("seed") or 0
        # Shard fields are the servers' to fill; the optimizer comes when known.
        config = store.table_config(layer.output_dim, layer.input_dim, 0, 1, layer.name, table_id, seed,
                                    initializer, store.SGD())
        err = _native.error_buffer()
        _native.check(_native.lib().tfx_ps_create_table(client_id, ctypes.byref(config), err,
                                                         _native.ERR_LEN), err)
        # Keras trains what it finds in trainable_weights: the anchor is the
        # table's stand-in there. Its own value never changes.
        self.anchor = layer.add_weight(shape=(), initializer="zeros", name="ps_anchor", trainable=True)
        self.anchor._tfx_ps_table = self

    def lookup(self, unique_ids):
        anchor = self.anchor
        lookup_op = _ops_lib().tfx_ps_lookup

        @tf.custom_gradient
        def fetch(ids):
            rows = lookup_op(ids, client_id=self._client_id, table_id=self.table_id, dim=self.dim)
            rows = rows + tf.zeros([], rows.dtype) * tf.cast(anchor.value, rows.dtype)

            def grad(d_rows, variables=None):
                slices = tf.IndexedSlices(d_rows, ids, dense_shape=tf.constant([_ID_SPACE, self.dim], tf.int64))
                return None, [slices] * len(variables or [])

            return rows, grad

        return fetch(tf.cast(unique_ids, tf.int64))

    def set_optimizer(self, optimizer) -> None:
        """Tells the servers which rule trains this table (once per optimizer)."""
        try:
            rule = store.optimizer_from_keras(optimizer)
        except ValueError as e:
            raise ValueError(f"ShardedEmbedding '{self.name}' on parameter servers: {e}") from None
        if rule == self._optimizer:
            return
        err = _native.error_buffer()
        _native.check(_native.lib().tfx_ps_set_optimizer(
            self._client_id, self.table_id, ctypes.byref(store.optimizer_config(rule)), err,
            _native.ERR_LEN), err)
        self._optimizer = rule

    def push(self, gradient, learning_rate):
        """The op that sends this replica's gradient rows (`tf.IndexedSlices`) to the servers."""
        if not isinstance(gradient, tf.IndexedSlices):
            raise TypeError(f"ShardedEmbedding '{self.name}': expected the table's gradient as "
                            f"tf.IndexedSlices. Received: {type(gradient).__name__}")
        return _ops_lib().tfx_ps_push(tf.cast(gradient.indices, tf.int64),
                                      tf.cast(gradient.values, tf.float32),
                                      tf.cast(learning_rate, tf.float32),
                                      client_id=self._client_id, table_id=self.table_id)
