"""A `ShardedEmbedding`'s table on the parameter servers.

Rows are fetched by the ``TfxPsTableLookup`` op; their gradient reaches the
servers through Keras's own optimizer call. The op takes a scalar *anchor*
variable as an input (never read), and its registered gradient for the
anchor is a `tf.IndexedSlices` over the batch's distinct ids. Keras hands
the anchor's gradient, with the current learning rate, to the optimizer's
update step, where the strategy pushes it to the servers instead
(`ParameterServerExtended.push_table_gradients`). Nothing of the table's
size exists on a worker.

Checkpoints: the table is a `Trackable` that `tf.train.Checkpoint` (and
`tf.train.CheckpointManager`) saves like a variable, through TensorFlow's
saveable API (``_serialize_to_tensors`` / ``_restore_from_tensors``). What it
serializes is small: the prefix of the files its servers write (each server
its own shard, in parallel; see `table_checkpoint`), the optimizer rule whose
slots they hold and the servers' step count of that optimizer. On save, the
chief asks the servers to write (the other workers, which save to temporary
folders, record the prefix only); on restore, every worker asks them to read
(idempotent: each server replaces its rows with the same ones). Being an
ordinary saveable, it is restored when the checkpoint is restored after the
model is built, and also later, when a model built after ``restore()`` creates
the table (deferred restoration).
"""

from __future__ import annotations

import ctypes

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist import _tf_compat as tfc
from tfx_dist.embedding import store
from tfx_dist.embedding.trained import TrainedByStore
from tfx_dist.parameter_server import _native, keras_files, table_checkpoint
from tfx_dist.tables import protocol
from tfx_dist.tables.placement import Placement

# A dense shape for the anchor's gradient: the rows it names are ids, not
# positions in a variable of that size (dynamic tables have no size).
_ID_SPACE = 1 << 62


def _ops_lib():
    return _ops.load_op_library("_ps_ops")


@tf.RegisterGradient("TfxPsTableLookup")
def _table_lookup_grad(op, d_rows):
    """The anchor's gradient: the rows' gradient over the looked-up ids (the servers' rows)."""
    dense_shape = tf.constant([_ID_SPACE, op.get_attr("dim")], tf.int64)
    return [tf.IndexedSlices(d_rows, op.inputs[1], dense_shape=dense_shape), None]


# The anchor is never written: lookups of one table need no order among themselves.
tfc.auto_control_deps_utils.register_read_only_resource_op("TfxPsTableLookup")


class RemoteTable(tfc.trackable_base.Trackable, TrainedByStore):
    """The table of one `ShardedEmbedding` layer, sharded over the parameter servers.

    Args:
      layer: the `ShardedEmbedding` being built.
      client_id: this worker's parameter-server client.
      table_id: the table's id, the same on every worker.
      is_chief: returns whether this worker writes checkpoints.
    """

    def __init__(self, layer, client_id: int, table_id: int, is_chief=lambda: True):
        self.name = layer.name
        self.placement = Placement.ON_SERVERS
        self.input_dim = layer.input_dim
        self.is_chief = is_chief
        self.dim = layer.output_dim
        self.table_id = table_id
        self._client_id = client_id
        # CheckpointManager's clean-up of old checkpoints deletes their shard files too.
        tfc.delete_with_checkpoints(table_checkpoint.SHARD_FILES_OF_CHECKPOINT)
        try:
            initializer = store.initializer_from_keras(layer.embeddings_initializer)
        except ValueError as e:
            raise ValueError(f"ShardedEmbedding '{layer.name}': {e}") from None
        self.seed = seed = layer.embeddings_initializer.get_config().get("seed") or 0
        self.initializer = initializer
        # Shard fields are the servers' to fill; the optimizer comes when known.
        config = store.table_config(layer.output_dim, layer.input_dim, 0, 1, layer.name, table_id, seed,
                                    initializer, store.SGD())
        _native.call(_native.lib().tfx_ps_create_table, client_id, ctypes.byref(config))
        # Keras trains what it finds in trainable_weights: the anchor is the
        # table's stand-in there. Its own value never changes.
        self.anchor = layer.add_weight(shape=(), initializer="zeros", name="ps_anchor", trainable=True)
        protocol.mark_anchor(self.anchor, self)

    def lookup(self, unique_ids):
        """The rows of distinct int64 ids: one ``TfxPsTableLookup`` op, differentiable.

        The op takes the anchor's handle (never reads it), so its registered
        gradient (`_table_lookup_grad`) gives the anchor the rows' gradient, as
        ``ResourceGather`` does for a variable: no ``tf.custom_gradient``,
        variable read or identities around it, each of which cost a call
        eagerly and an op in a graph.
        """
        anchor = tfc.component_variable(self.anchor.value)
        # As ResourceVariable.sparse_read: the tape (and the FuncGraph) must see the variable.
        tfc.resource_variable_ops.variable_accessed(anchor)
        return _ops_lib().tfx_ps_table_lookup(anchor.handle, tf.cast(unique_ids, tf.int64),
                                              client_id=self._client_id, table_id=self.table_id,
                                              dim=self.dim)

    def _trained(self) -> str:
        return f"ShardedEmbedding '{self.name}' on parameter servers"

    def _use_rule(self, rule) -> None:
        _native.set_optimizer(self._client_id, self.table_id, rule)  # the servers keep its slots

    def push(self, gradient, learning_rate):
        """The op that sends this replica's gradient rows (`tf.IndexedSlices`) to the servers."""
        if not isinstance(gradient, tf.IndexedSlices):
            raise TypeError(f"ShardedEmbedding '{self.name}': expected the table's gradient as "
                            f"tf.IndexedSlices. Received: {type(gradient).__name__}")
        return _ops_lib().tfx_ps_push(tf.cast(gradient.indices, tf.int64),
                                      tf.cast(gradient.values, tf.float32),
                                      tf.cast(learning_rate, tf.float32),
                                      client_id=self._client_id, table_id=self.table_id)

    # -- checkpoints ---------------------------------------------------------------------------

    def save_to_keras_store(self, store) -> None:
        """Keras's ``save_own_variables``: the rows and slots into the chief's file (`keras_files`)."""
        keras_files.save(self, store)

    def load_from_keras_store(self, store) -> None:
        """Keras's ``load_own_variables``: a file of any placement onto the servers (`keras_files`)."""
        keras_files.load(self, store)

    def save(self, prefix: str) -> int:
        """Has every server write its shard to ``prefix.shard-<s>-of-<S>`` (in parallel).

        Returns the table's optimizer step count (Adam's), which the files do not hold.
        """
        return table_checkpoint.save_on_servers(self._client_id, self.table_id, prefix)

    def restore(self, prefix: str, optimizer=None, applies: int = 0) -> None:
        """Replaces the rows (and slots) on every server with those saved at ``prefix``.

        The files may come from any number of servers. ``optimizer``: the store
        rule the files' slots belong to (set on the servers first); ``applies``:
        the step count `save` returned.

        Raises:
          FileNotFoundError: a shard file is missing (named); the table is unchanged.
          ParameterServerError: a file is corrupt or does not fit the table (named).
        """
        paths = table_checkpoint.shard_files(prefix, self.name)  # missing: raises, table unchanged
        if optimizer is not None:
            self._set_rule(optimizer)
        table_checkpoint.restore_on_servers(self._client_id, self.table_id, paths, applies)

    def _serialize_to_tensors(self):
        # TensorFlow also calls this outside saves (restoring asks for the
        # tensors' names): only a save of tf.train.Checkpoint has a prefix.
        checkpoint_prefix = tfc.current_checkpoint_prefix()
        prefix, applies = "", 0
        if checkpoint_prefix is not None:
            prefix = table_checkpoint.table_prefix(checkpoint_prefix, self.name, self.table_id)
            if self.is_chief():
                applies = self.save(prefix)
        with tf.device("/cpu:0"):
            return {"shard_prefix": tf.constant(prefix), "applies": tf.constant(applies, tf.int64),
                    "optimizer": tf.constant(table_checkpoint.encode_optimizer(self.optimizer_rule))}

    def _restore_from_tensors(self, restored_tensors):
        def restore(prefix, optimizer, applies):
            prefix = prefix.numpy().decode("utf-8")
            if not prefix:
                raise ValueError(
                    f"ShardedEmbedding '{self.name}': this checkpoint holds no rows of the table on "
                    "the parameter servers: they are saved by tf.train.Checkpoint's write/save or "
                    "tf.train.CheckpointManager.save called eagerly (not by SavedModel export or "
                    "a save inside tf.function)")
            self.restore(table_checkpoint.beside(prefix, tfc.current_restore_prefix()),
                         table_checkpoint.decode_optimizer(optimizer.numpy().decode("utf-8")),
                         int(applies.numpy()))
            return tf.constant(True)

        args = [restored_tensors[k] for k in ("shard_prefix", "optimizer", "applies")]
        if tf.executing_eagerly():
            restore(*args)
            return None
        return tf.py_function(restore, args, tf.bool)
