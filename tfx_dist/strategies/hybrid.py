"""`tfx_dist.HybridStrategy`: dense layers data-parallel, embedding tables model-parallel.

Large recommenders (DLRM and its descendants) train their dense layers on
every worker and split their embedding tables between the workers, as
TorchRec does. With this strategy, on every worker of a ``TF_CONFIG`` job:

* dense variables are mirrored and their gradients all-reduced by the ring
  (`tfx_dist.MultiWorkerMirroredStrategy`, which this is);
* a `tfx_dist.layers.ShardedEmbedding` table is *sharded*: worker ``r`` of
  ``N`` holds rows ``id % N == r`` in its in-process embedding store, with the
  store's copy of the Keras optimizer; lookups and gradient rows travel by
  all-to-all (`tfx_dist.tables.on_workers`);
* or, if it is small, *replicated*: a plain mirrored variable whose gradient
  is all-reduced (`tfx_dist.hybrid.placement`: ``TFX_HYBRID_SHARD_MIN_BYTES``,
  overridden per layer by ``ShardedEmbedding(..., placement=...)``);
* with ``ps`` tasks in the job, sharded tables live on the parameter servers
  instead: the strategy then does what `tfx_dist.ParameterServerStrategy`
  does (on a ps task, constructing it serves and exits).
"""

from __future__ import annotations

import sys

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist import cluster as cluster_lib
from tfx_dist import errors, settings
from tfx_dist.elastic import membership
from tfx_dist.hybrid import placement as placement_lib
from tfx_dist.tables.on_workers import WorkerShardedTable, apply_together
from tfx_dist.strategies.multi_worker_mirrored import (MultiWorkerMirroredExtended,
                                                       MultiWorkerMirroredStrategy)
from tfx_dist.parameter_server import server
from tfx_dist.strategies.parameter_server import ParameterServerExtended, run_step_on_servers
from tfx_dist.tables import gradients as table_gradients
from tfx_dist.tables.local import LocalTable
from tfx_dist.tables.placement import Placement
from tfx_dist.tables.protocol import TableHost


class HybridExtended(MultiWorkerMirroredExtended, TableHost):
    """The multi-worker extended, plus tables sharded over the workers."""

    def __init__(self, container_strategy, shard_min_bytes=None, **kwargs):
        if membership.elastic():
            raise errors.UnimplementedError(
                "tfx_dist.HybridStrategy does not run in an elastic job (tfx-dist-run --elastic): its "
                "tables are sharded over the workers, and a lost worker's shard is lost with it. Use "
                "the restart path instead: tfx-dist-run -n N --max-restarts K --checkpoint-dir DIR "
                "(the job restarts from its last checkpoint, tables included; docs/reliability.md).")
        super().__init__(container_strategy, **kwargs)
        self._shard_min_bytes = shard_min_bytes
        self._sharded_tables: list[WorkerShardedTable] = []
        tfc.route_table_gradients()

    def create_embedding_table(self, layer):
        """The table of a `ShardedEmbedding` (called when the layer is built)."""
        if placement_lib.choose(layer, self._shard_min_bytes) == Placement.REPLICATED:
            return LocalTable(layer, Placement.REPLICATED)
        if len(self.worker_devices) > 1:
            raise ValueError(
                f"ShardedEmbedding '{layer.name}': HybridStrategy shards tables over workers of "
                f"one replica each; this worker has {len(self.worker_devices)} local devices "
                f"({list(self.worker_devices)}). Run one process per device (tfx-dist-run -n ...), "
                "pass devices=[one device], or keep this table replicated "
                "(placement=\"replicated\").")
        transport = self._transport
        table = WorkerShardedTable(layer, table_id=len(self._sharded_tables), rank=transport.rank,
                                   num_workers=transport.size,
                                   communicator=getattr(transport, "communicator", None),
                                   is_chief=lambda: bool(self.should_checkpoint))
        self._sharded_tables.append(table)
        return table

    def push_table_gradients(self, optimizer, grads, variables, learning_rate):
        """Sends the sharded tables' gradient rows to their owners; returns the other (grad, var).

        Called by Keras's optimizer in each replica before it all-reduces the
        gradients: a sharded table's rows are summed by their owner, not by
        the ring. The owners apply the store's copy of ``optimizer`` with its
        step count (Keras's ``iterations + 1``).
        """
        tables, rest_grads, rest_vars = table_gradients.split_table_gradients(grads, variables)
        step = tf.cast(optimizer.iterations, tf.int64) + 1
        for table, _ in tables:
            table.set_optimizer(optimizer)
        # Stateful ops: the step's function runs them (automatic control dependencies).
        if len(tables) > 1 and self._transport.size > 1 and settings.get("TFX_ALLTOALL_FUSION"):
            # Every table's rows in one all-to-all, whatever the timing (the
            # runtime fuses separate ones only when they happen to be ready
            # in the same negotiation cycle).
            apply_together(tables, learning_rate, step, self._transport.communicator)
        else:
            for table, grad in tables:
                table.apply(grad, learning_rate, step)
        return rest_grads, rest_vars


class HybridStrategy(MultiWorkerMirroredStrategy):
    """Data-parallel dense layers with model-parallel `ShardedEmbedding` tables.

    Run the same program on every worker (``tfx-dist-run -n 2 python train.py``).
    Without ``ps`` tasks each worker holds a shard of every large table and the
    workers exchange ids, rows and gradient rows by all-to-all; small tables are
    replicated. With ``ps`` tasks (``tfx-dist-run -n 2 --ps 2 ...``) the tables
    live on the servers, as under `tfx_dist.ParameterServerStrategy`.

    Example (a large table sharded over the workers, a small one replicated):
    ```python
    strategy = tfx_dist.HybridStrategy()
    with strategy.scope():
        users, items = keras.Input((1,), dtype="int64"), keras.Input((3,), dtype="int64")
        u = tfx_dist.layers.ShardedEmbedding(50_000_000, 32, combiner="sum")(users)
        i = tfx_dist.layers.ShardedEmbedding(1_000, 32, combiner="mean")(items)
        out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Concatenate()([u, i]))
        model = keras.Model([users, items], out)
        model.compile("adagrad", "binary_crossentropy")
    model.fit(dataset, epochs=3)  # dataset: ((user_ids, item_ids), labels)
    ```

    Sharded tables are trained by the embedding store's copies of Keras's SGD,
    Adagrad, Adam, AdamW, Ftrl, RMSprop, Adadelta, Adamax, Lion and Nadam, weight
    decay included. Keras's
    ``save_weights`` / ``model.save`` (and so ``ModelCheckpoint`` and
    ``BackupAndRestore``) write them whole, with their optimizer slots, into
    the chief's file, and load into any number of workers; call them on every
    worker (`tfx_dist.hybrid.keras_files`). `tf.train.Checkpoint` works too.
    One replica per worker: a worker with several local devices may keep
    replicated tables only (a sharded one raises ValueError).

    Args:
      cluster_resolver: optional; by default ``TF_CONFIG``.
      shard_min_bytes: tables of at least this many bytes are sharded, the
        others replicated (default ``TFX_HYBRID_SHARD_MIN_BYTES``); a layer's
        ``placement=`` overrides it.
      mode: with ``ps`` tasks, ``"sync"`` or ``"async"`` (see
        `tfx_dist.ParameterServerStrategy`); ignored without.
      devices, timeout_s: as for `tfx_dist.MultiWorkerMirroredStrategy`.
    """

    def __init__(self, cluster_resolver=None, *, shard_min_bytes: int | None = None,
                 mode: str = "sync", devices=None, timeout_s=None):
        info = cluster_lib.resolve(cluster_resolver)
        if info.ps_addresses:
            if info.task_type == "ps":
                sys.exit(server.serve(info, synchronous=mode == "sync", timeout_s=timeout_s))
            extended = ParameterServerExtended(self, info, mode, cluster_resolver=cluster_resolver,
                                               devices=devices, timeout_s=timeout_s)
        else:
            extended = HybridExtended(self, shard_min_bytes=shard_min_bytes,
                                      cluster_resolver=cluster_resolver, cluster_info=info,
                                      devices=devices, timeout_s=timeout_s)
        tfc.distribute_lib.Strategy.__init__(self, extended)
        tfc.build_from_first_replica(type(self))

    def run(self, fn, args=(), kwargs=None, options=None):
        """`tf.distribute.Strategy.run` (with parameter servers, then the end of the step there)."""
        def call():
            return super(HybridStrategy, self).run(fn, args=args, kwargs=kwargs, options=options)
        if isinstance(self.extended, ParameterServerExtended):
            return run_step_on_servers(self.extended, call)
        return call()
