"""A table in one Keras variable (no strategy, or replicated), and choosing a layer's table.

`create` picks the table for the strategy in scope: a strategy that holds
tables itself is a `protocol.TableHost`; any other strategy, or none, gets a
`LocalTable` (or, for ``input_dim=None``, a `local_dynamic.LocalDynamicTable`).

Checkpoints: a `LocalTable` is saved by `tf.train.Checkpoint` as a table on
parameter servers or on the workers is: its rows in a shard file beside the
checkpoint (one shard: ``<prefix>-tfx_ps-<layer>-0.shard-0-of-1``), the
checkpoint recording where (``shard_prefix``, ``optimizer``, ``applies``). So
a checkpoint of any placement restores into any other: here, from the shard
files of any number of servers or workers. (The rows used to be in no
checkpoint, and a plain model restored a server checkpoint without its tables,
silently.)
"""

from __future__ import annotations

import os
import re

import numpy as np
import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist._tf_compat import replacements
from tfx_dist.embedding import store as store_lib
from tfx_dist.parameter_server import table_checkpoint
from tfx_dist.tables import keras_file, protocol
from tfx_dist.tables.placement import Placement

# `table_checkpoint.table_prefix` ends with the table's id, which fixes the initial value of the
# rows its files do not hold.
_TABLE_ID = re.compile(r"-(\d+)$")


def create(layer):
    """The table for ``layer`` under the strategy in scope."""
    strategy = tf.distribute.get_strategy()
    host = protocol.host_in_scope(strategy)
    if host is not None:
        return host.create_embedding_table(layer)
    if layer.input_dim is None:
        from tfx_dist.tables import local_dynamic

        return local_dynamic.create(layer, strategy)
    placement = Placement.LOCAL if strategy.num_replicas_in_sync == 1 else Placement.REPLICATED
    return LocalTable(layer, placement)


class LocalTable(tfc.trackable_base.Trackable):
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
            constraint=layer.embeddings_constraint, name="embeddings", trainable=True)
        protocol.mark_rows(self.embeddings, self)
        self._initializer = layer.embeddings_initializer
        # A checkpoint writes the rows beside itself (checkpoint_files learns its prefix).
        replacements.install()
        # CheckpointManager's clean-up of old checkpoints deletes the rows' shard files too.
        tfc.delete_with_checkpoints(table_checkpoint.SHARD_FILES_OF_CHECKPOINT)
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

    # -- tf.train.Checkpoint ----------------------------------------------------------------------

    def _serialize_to_tensors(self):
        # TensorFlow also calls this outside saves (restoring asks for the
        # tensors' names): only a save of tf.train.Checkpoint has a prefix.
        checkpoint_prefix = tfc.current_checkpoint_prefix()
        prefix = ""
        if checkpoint_prefix is not None:
            prefix = table_checkpoint.table_prefix(checkpoint_prefix, self.name, 0)
            self._save_shard_file(prefix)
        with tf.device("/cpu:0"):
            return {"shard_prefix": tf.constant(prefix), "applies": tf.constant(0, tf.int64),
                    "optimizer": tf.constant("")}

    def _store_shard(self, table_id: int, rule):
        return store_lib.TableShard(
            self.dim, self.input_dim, name=self.name, table_id=table_id,
            seed=self._initializer.get_config().get("seed") or 0,
            initializer=store_lib.initializer_from_keras(self._initializer), optimizer=rule)

    def _save_shard_file(self, prefix: str) -> None:
        """The rows as the one shard of a table (the embedding store's file)."""
        for stale in table_checkpoint.existing_shards(prefix):
            tf.io.gfile.remove(stale)
        rows = self.embeddings.numpy()
        shard = self._store_shard(0, store_lib.SGD())
        try:
            for ids in self._id_chunks():
                shard.write_records(ids, rows[ids][:, None, :])
            tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
            shard.save(table_checkpoint.shard_path(prefix, 0, 1))
        finally:
            shard.close()

    def _id_chunks(self):
        step = keras_file.chunk_rows(self.dim)
        for start in range(0, self.input_dim, step):
            yield np.arange(start, min(start + step, self.input_dim), dtype=np.int64)

    def _restore_from_tensors(self, restored_tensors):
        def restore(prefix, optimizer):
            self.restore_shard_files(prefix.numpy().decode("utf-8"), table_checkpoint.decode_optimizer(
                optimizer.numpy().decode("utf-8")))
            return tf.constant(True)

        args = [restored_tensors.get(k) for k in ("shard_prefix", "optimizer")]
        if any(a is None for a in args):
            raise ValueError(f"ShardedEmbedding '{self.name}': the checkpoint holds neither rows nor "
                             "shard files of this table")
        if tf.executing_eagerly():
            restore(*args)
            return None
        return tf.py_function(restore, args, tf.bool)

    def restore_shard_files(self, recorded_prefix: str, rule=None) -> None:
        """The rows of a checkpoint of a table on servers or workers (its shard files).

        Raises:
          ValueError: the checkpoint holds no rows of the table.
          FileNotFoundError: a shard file is missing (named).
        """
        if not recorded_prefix:
            raise ValueError(f"ShardedEmbedding '{self.name}': this checkpoint holds no rows of the "
                             "table (saved by SavedModel export or inside a tf.function)")
        prefix = table_checkpoint.beside(recorded_prefix, tfc.current_restore_prefix())
        paths = table_checkpoint.shard_files(prefix, self.name)
        found = _TABLE_ID.search(prefix)
        shard = self._store_shard(int(found.group(1)) if found else 0, rule or store_lib.SGD())
        try:
            shard.restore(paths)
            rows = np.empty((self.input_dim, self.dim), np.float32)
            for ids in self._id_chunks():
                rows[ids] = shard.lookup(ids)
        finally:
            shard.close()
        self.embeddings.assign(rows)
