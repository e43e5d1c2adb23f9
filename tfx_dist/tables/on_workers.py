"""A `ShardedEmbedding`'s table spread over the workers (HybridStrategy without ps tasks).

Worker ``r`` of ``N`` holds rows ``id % N == r`` in this process's embedding
store (`tfx_dist.embedding.store.TableShard`: rows and optimizer slots in
C++, nothing of the whole table's size anywhere). A lookup of distinct ids
sends each id to its owner (all-to-all), reads the owner's rows
(``TfxStoreLookup``) and sends them back (all-to-all). The gradient takes the
parameter servers' route (`tfx_dist.tables.on_servers`): the
lookup reads a scalar *anchor* variable inside a `tf.custom_gradient` whose
gradient for the anchor is a `tf.IndexedSlices` over the ids; the strategy
takes it out of Keras's optimizer step (``push_table_gradients``), sends each
row to its owner (all-to-all) and the owner applies the store's copy of the
Keras optimizer to the rows of every worker at once (``TfxStoreApply``;
repeated ids summed). Every worker must look up every table in every step
(each exchange waits for all workers), as with any collective.

Checkpoints: like a parameter-server table, the table serializes only the
prefix of its shard files, and the optimizer rule of their slots; every
worker writes its own shard beside the chief's checkpoint
(``<prefix>-tfx_ps-<layer>-<id>.shard-<r>-of-<N>``, the parameter servers'
layout), and on restore every worker reads its share from the files of any
number of shards (workers or servers).
"""

from __future__ import annotations

import os
import re
import weakref

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist import _tf_compat as tfc
from tfx_dist.embedding import store
from tfx_dist.hybrid import exchange, keras_files
from tfx_dist.parameter_server import table_checkpoint
from tfx_dist.tables import gradients, protocol
from tfx_dist.tables.in_process import InProcessShard
from tfx_dist.tables.placement import Placement

# TensorFlow's convention for a non-chief worker's checkpoint folder (tfx_dist.checkpointing).
_WORKER_TEMP = re.compile(r"^workertemp_\d+$")


def _ops_lib():
    return _ops.load_op_library("_ps_ops")


class WorkerShardedTable(tfc.trackable_base.Trackable, InProcessShard):
    """The table of one `ShardedEmbedding` layer, one shard per worker.

    Args:
      layer: the `ShardedEmbedding` being built.
      table_id: the table's id, the same on every worker (part of the rows' seed).
      rank, num_workers: this worker's shard and the number of shards.
      communicator: the workers' `tfx_dist.comm.Communicator` (None for one worker).
      is_chief: returns whether this worker writes the checkpoint's files.
    """

    def __init__(self, layer, table_id: int, rank: int, num_workers: int, communicator,
                 is_chief=lambda: True):
        if layer.input_dim is None:
            raise ValueError(
                f"ShardedEmbedding '{layer.name}' has input_dim=None (a dynamic table), which "
                "HybridStrategy keeps only on parameter servers: add ps tasks to the job "
                "(`tfx-dist-run -n 2 --ps 2 ...`) or give input_dim.")
        if num_workers > 1 and communicator is None:
            raise ValueError("A table sharded over several workers needs their communicator.")
        self.name = layer.name
        self.placement = Placement.ON_WORKERS
        self.input_dim = layer.input_dim
        self.dim = layer.output_dim
        self.table_id = table_id
        self.rank, self.num_workers = rank, num_workers
        self._communicator = communicator
        self._is_chief = is_chief
        self._last_store_op = weakref.WeakKeyDictionary()  # graph -> this shard's last store op
        try:
            initializer = store.initializer_from_keras(layer.embeddings_initializer)
        except ValueError as e:
            raise ValueError(f"ShardedEmbedding '{layer.name}': {e}") from None
        seed = layer.embeddings_initializer.get_config().get("seed") or 0
        self.shard = store.TableShard(self.dim, self.input_dim, shard_index=rank,
                                      num_shards=num_workers, name=layer.name, table_id=table_id,
                                      seed=seed, initializer=initializer, optimizer=store.SGD())
        # Keras trains what it finds in trainable_weights: the anchor stands in
        # for the table there. Its own value never changes.
        self.anchor = layer.add_weight(shape=(), initializer="zeros", name="hybrid_anchor",
                                       trainable=True)
        protocol.mark_anchor(self.anchor, self)

    # -- lookups and gradients -----------------------------------------------------------------

    def _check_ids(self, ids):
        return [
            tf.debugging.assert_non_negative(
                ids, message=f"ShardedEmbedding '{self.name}': ids must be >= 0"),
            tf.debugging.assert_less(
                ids, tf.constant(self.input_dim, tf.int64),
                message=f"ShardedEmbedding '{self.name}': ids must be < input_dim ({self.input_dim})"),
        ]

    def _in_table_order(self, build, independent: bool = True):
        """Builds a store op (a lookup or an apply of this shard) after this table's previous
        one in the same graph, and takes it out of tf.function's single chain of stateful ops.

        That chain would order every table's store ops one after the other,
        and with them the tables' all-to-alls: a lookup of one table then waits
        for the other's exchange, and their exchanges never reach the runtime
        together to be fused. Ops on one shard keep their program order.
        ``independent=False`` keeps the op in the chain (a restore: ordered
        with the rest of the checkpoint's restore ops).
        """
        if tf.executing_eagerly():
            return build()
        graph = tf.compat.v1.get_default_graph()
        last = self._last_store_op.get(graph)
        with tf.control_dependencies([last] if last is not None else []):
            out = build()
        op = getattr(out, "op", out)
        self._last_store_op[graph] = op
        if independent:
            tfc.run_independently(graph, [op])
        return out

    def _local_lookup(self, ids):
        return self._in_table_order(
            lambda: _ops_lib().tfx_store_lookup(ids, handle=self.shard.handle, dim=self.dim))

    def _rows(self, ids):
        # Checked here, before any exchange: a bad id must fail on the worker
        # that has it, not leave the others waiting in the all-to-all.
        with tf.control_dependencies(self._check_ids(ids)):
            ids = tf.identity(ids)
        if self.num_workers == 1:
            return self._local_lookup(ids)
        grouping = exchange.group_by_owner(ids, self.num_workers)
        (owned_ids,), received_splits = exchange.send_to_owners(grouping, [ids], self._communicator)
        rows = self._local_lookup(owned_ids)
        return exchange.return_to_senders(rows, received_splits, grouping, self._communicator)

    def lookup(self, unique_ids):
        """The rows of distinct ids; differentiable (the gradient reaches the anchor)."""
        return gradients.anchored_lookup(self.anchor, unique_ids, self._rows,
                                         tf.constant([self.input_dim, self.dim], tf.int64))

    def _trained(self) -> str:
        return f"ShardedEmbedding '{self.name}' sharded over the workers"

    def apply(self, gradient, learning_rate, step):
        """The op that sends this worker's gradient rows to their owners, which apply them.

        ``gradient``: `tf.IndexedSlices` over ids; ``step``: the 1-based count
        of the optimizer's applies (Adam's bias correction).
        """
        ids, grads = gradient_rows(self.name, gradient)
        if self.num_workers > 1:
            grouping = exchange.group_by_owner(ids, self.num_workers)
            (ids, grads), _ = exchange.send_to_owners(grouping, [ids, grads], self._communicator)
        return self.apply_owned(ids, grads, learning_rate, step)

    def apply_owned(self, ids, grads, learning_rate, step):
        """The op that applies gradient rows of ids this worker owns (from every worker)."""
        return self._in_table_order(lambda: self._store_apply(ids, grads, learning_rate, step))

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self, prefix: str) -> None:
        """Writes this worker's shard to ``prefix.shard-<rank>-of-<N>``."""
        if self._is_chief():  # files of a job of another size would mix with these
            for stale in table_checkpoint.existing_shards(prefix):
                if not stale.endswith(f"-of-{self.num_workers}"):
                    tf.io.gfile.remove(stale)
        tf.io.gfile.makedirs(os.path.dirname(prefix) or ".")
        self.shard.save(table_checkpoint.shard_path(prefix, self.rank, self.num_workers))

    def save_to_keras_store(self, store) -> None:
        """Streams the whole table into the chief's Keras file (`keras_files`); every worker calls it."""
        keras_files.save(self, store)

    def load_from_keras_store(self, store) -> None:
        """Reads this worker's rows (and slots) from a Keras file (`keras_files`)."""
        keras_files.load(self, store)

    def _serialize_to_tensors(self):
        # TensorFlow also calls this outside saves (restoring asks for the
        # tensors' names): only a save of tf.train.Checkpoint has a prefix.
        checkpoint_prefix = tfc.current_checkpoint_prefix()
        prefix = ""
        if checkpoint_prefix is not None:
            prefix = table_checkpoint.table_prefix(_chief_prefix(checkpoint_prefix), self.name,
                                                   self.table_id)
            self.save(prefix)
        with tf.device("/cpu:0"):
            # The parameter servers' names: a checkpoint of either restores into the other.
            return {"shard_prefix": tf.constant(prefix), "applies": tf.constant(0, tf.int64),
                    "optimizer": tf.constant(table_checkpoint.encode_optimizer(self.optimizer_rule))}

    def _restore_from_tensors(self, restored_tensors):
        def restore(prefix, optimizer):
            prefix = prefix.numpy().decode("utf-8")
            if not prefix:
                raise ValueError(
                    f"ShardedEmbedding '{self.name}': this checkpoint holds no rows of the table: "
                    "they are saved by tf.train.Checkpoint's write/save or "
                    "tf.train.CheckpointManager.save called eagerly (not by SavedModel export or "
                    "a save inside tf.function)")
            self.restore(table_checkpoint.beside(prefix, tfc.current_restore_prefix()),
                         table_checkpoint.decode_optimizer(optimizer.numpy().decode("utf-8")))
            return tf.constant(True)

        args = [restored_tensors[k] for k in ("shard_prefix", "optimizer")]
        if tf.executing_eagerly():
            restore(*args)
            return None
        # In a tf.function: a store op of this table, so that the graph's later
        # lookups and applies of the table (out of the chain of stateful ops)
        # still run after it.
        return self._in_table_order(lambda: tf.py_function(restore, args, tf.bool),
                                    independent=False)


def gradient_rows(name: str, gradient):
    """(int64 ids, float32 rows) of a table's `tf.IndexedSlices` gradient."""
    if not isinstance(gradient, tf.IndexedSlices):
        raise TypeError(f"ShardedEmbedding '{name}': expected the table's gradient as "
                        f"tf.IndexedSlices. Received: {type(gradient).__name__}")
    return tf.cast(gradient.indices, tf.int64), tf.cast(gradient.values, tf.float32)


def apply_together(tables_and_grads, learning_rate, step, communicator):
    """Ops applying several tables' gradients: their rows reach the owners in two all-to-alls.

    Every worker passes the same tables in the same order (Keras's trainable
    variables are in model order on every worker).
    """
    first = tables_and_grads[0][0]
    ids_rows = [gradient_rows(table.name, grad) for table, grad in tables_and_grads]
    received = exchange.send_tables_to_owners([i for i, _ in ids_rows], [r for _, r in ids_rows],
                                              first.num_workers, communicator)
    return [table.apply_owned(ids, rows, learning_rate, step)
            for (table, _), (ids, rows) in zip(tables_and_grads, received)]


def _chief_prefix(checkpoint_prefix: str) -> str:
    """The chief's checkpoint prefix for this worker's: every shard goes beside the chief's
    files, not into a non-chief's temporary folder (``<dir>/workertemp_<id>/``)."""
    folder, base = os.path.split(checkpoint_prefix)
    if _WORKER_TEMP.match(os.path.basename(folder)):
        return os.path.join(os.path.dirname(folder), base)
    return checkpoint_prefix
