"""A dynamic table (``input_dim=None``) in this process: a laptop run, one-process evaluation.

Without parameter servers a `ShardedEmbedding` with ``input_dim=None`` keeps
its rows in this process's embedding store (`tfx_dist.embedding.store`: any
int64 id, a row created on its first lookup, the same initial values and
update rules as on the servers), as TFRA's local dynamic embedding does. Its
gradient takes the servers' route: the lookup gives a scalar *anchor* the
rows' gradient (`gradients.anchored_lookup`), and Keras's optimizer step
hands it to the table (`_tf_compat.table_gradients`), which applies the
store's copy of that optimizer (`tfx_dist.embedding.rules.NATIVE_RULES`) to the rows.

Checkpoints and Keras files are those of a dynamic table on the servers: its
rows in a shard file beside the checkpoint (or the Keras file), so a job's
checkpoint of a dynamic table, written by any number of servers, restores
here for evaluation, and this table's checkpoint restores onto servers.
One replica only: under a strategy of several replicas, use parameter servers.
"""

from __future__ import annotations

import itertools
import os

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist import _tf_compat as tfc
from tfx_dist.embedding import store
from tfx_dist.parameter_server import keras_files, table_checkpoint
from tfx_dist.tables import gradients, on_servers, protocol
from tfx_dist.tables.in_process import InProcessShard
from tfx_dist.tables.on_workers import gradient_rows
from tfx_dist.tables.placement import Placement

# The anchor's gradient names ids, not positions in a variable (on_servers: the same).
_ID_SPACE = 1 << 62
# Table ids in creation order, as a job's strategy numbers its tables (part of the rows' seed).
_next_table_id = itertools.count()


def create(layer, strategy):
    if strategy.num_replicas_in_sync != 1:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' has input_dim=None (a dynamic table): without "
            f"parameter servers it lives in this process, for one replica; this strategy has "
            f"{strategy.num_replicas_in_sync}. Use tfx_dist.ParameterServerStrategy (or "
            "HybridStrategy with ps tasks), or give input_dim.")
    return LocalDynamicTable(layer, next(_next_table_id))


def _ops_lib():
    return _ops.load_op_library("_ps_ops")


class LocalDynamicTable(tfc.trackable_base.Trackable, InProcessShard):
    """The dynamic table of one `ShardedEmbedding`, in this process's embedding store."""

    def __init__(self, layer, table_id: int):
        self.name = layer.name
        self.placement = Placement.LOCAL
        self.input_dim = None
        self.dim = layer.output_dim
        self.table_id = table_id
        try:
            self.initializer = store.initializer_from_keras(layer.embeddings_initializer)
        except ValueError as e:
            raise ValueError(f"ShardedEmbedding '{layer.name}': {e}") from None
        self.seed = layer.embeddings_initializer.get_config().get("seed") or 0
        self.shard = store.TableShard(self.dim, None, name=layer.name, table_id=table_id, seed=self.seed,
                                      initializer=self.initializer, optimizer=store.SGD())
        # Keras's optimizer step hands the anchor's gradient to apply_own_gradient.
        tfc.route_table_gradients()
        tfc.delete_with_checkpoints(table_checkpoint.SHARD_FILES_OF_CHECKPOINT)
        self.anchor = layer.add_weight(shape=(), initializer="zeros", name="local_anchor", trainable=True)
        protocol.mark_anchor(self.anchor, self)

    def lookup(self, unique_ids):
        """The rows of distinct int64 ids (created on first lookup); differentiable."""
        def rows(ids):
            return _ops_lib().tfx_store_lookup(ids, handle=self.shard.handle, dim=self.dim)

        return gradients.anchored_lookup(self.anchor, unique_ids, rows,
                                         tf.constant([_ID_SPACE, self.dim], tf.int64))

    def apply_own_gradient(self, optimizer, gradient, learning_rate):
        """The op applying the store's copy of ``optimizer`` to the rows of ``gradient``."""
        self.set_optimizer(optimizer)
        ids, rows = gradient_rows(self.name, gradient)
        return self._store_apply(ids, rows, learning_rate, tf.cast(optimizer.iterations, tf.int64) + 1)

    def _trained(self) -> str:
        return f"ShardedEmbedding '{self.name}' (a local dynamic table)"

    # -- checkpoints and Keras files: a dynamic table's on the servers ----------------------------

    def save(self, prefix: str) -> int:
        """Writes the rows (and slots) to ``prefix.shard-0-of-1``; returns the step count (0)."""
        for stale in table_checkpoint.existing_shards(prefix):
            tf.io.gfile.remove(stale)
        tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
        self.shard.save(table_checkpoint.shard_path(prefix, 0, 1))
        return 0

    def save_to_keras_store(self, keras_store) -> None:
        keras_files.save_beside(self, keras_store)

    def load_from_keras_store(self, keras_store) -> None:
        keras_files.load_beside(self, keras_store)

    def is_chief(self) -> bool:
        return True  # this process writes its own checkpoints

    # The servers' checkpoint entries, by the servers' code: a checkpoint of either restores
    # into the other (save: the rows to a shard file beside the checkpoint; restore: from the
    # files of any number of shards).
    _serialize_to_tensors = on_servers.RemoteTable._serialize_to_tensors
    _restore_from_tensors = on_servers.RemoteTable._restore_from_tensors
