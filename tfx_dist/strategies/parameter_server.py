"""`tfx_dist.ParameterServerStrategy`: embedding tables on parameter servers, for Keras 3.

TensorFlow's own `ParameterServerStrategy` does not run under Keras 3
(keras-team/keras#18624: Keras 3 has no `ClusterCoordinator` path). This one
runs the same program on every task of a ``TF_CONFIG`` job with ``ps`` tasks:

* on a ``ps`` task, constructing the strategy serves that server's shard of
  every table and exits the process (status 0 once every worker has finished,
  non-zero naming the workers if they vanish);
* on the chief and the workers it is a `tfx_dist.MultiWorkerMirroredStrategy`
  (Keras averages logs across workers, each worker reads its shard of the
  data) whose `tfx_dist.layers.ShardedEmbedding` tables live on the servers,
  sharded by row, trained there by the servers' copy of the model's Keras
  optimizer. Dense variables are mirrored on the workers and all-reduced
  (``dense_variables="workers"``), or held by the servers too
  (``dense_variables="servers"``: `parameter_server.dense_variables`).

Synchronous by default: every step applies the gradients of all workers once,
and no worker reads a table before the previous step has been applied
everywhere (``custom_ops/embedding/server/parameter_server.h``).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import sys

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist import _tf_compat as tfc
from tfx_dist import cluster as cluster_lib
from tfx_dist import layers as _layers  # noqa: F401 (registers ShardedEmbedding: load_model finds it)
from tfx_dist.comm.service import ServiceClient
from tfx_dist.strategies.multi_worker_mirrored import (MultiWorkerMirroredExtended,
                                                       MultiWorkerMirroredStrategy)
from tfx_dist.parameter_server import _native, server
from tfx_dist.parameter_server import elastic as ps_elastic
from tfx_dist.parameter_server import dense_checkpoint
from tfx_dist.parameter_server import dense_variables as dense_variables_lib
from tfx_dist.strategies import parameter_server_logs, partitioned_embeddings, plain_embeddings
from tfx_dist.tables.on_servers import RemoteTable
from tfx_dist.tables import gradients as table_gradients
from tfx_dist.tables.protocol import TableHost

_MODES = ("sync", "async")


class ParameterServerExtended(MultiWorkerMirroredExtended, TableHost, tfc.OptimizerExtrasHost):
    """The multi-worker extended, plus the tables' client and their gradients' route."""

    def __init__(self, container_strategy, info, mode, dense_placement="workers",
                 variable_partitioner=None, **kwargs):
        super().__init__(container_strategy, **kwargs)
        self._variable_partitioner = variable_partitioner
        plain_embeddings.install()
        servers = list(info.ps_addresses)
        labels = [f"ps {s} ({a})" for s, a in enumerate(servers)]
        if self._elastic:  # workers come and go: a session of the servers per generation
            self._service, self._ps_client = ps_elastic.connect_client(servers, kwargs.get("timeout_s"),
                                                                       labels)
            ps_elastic.follow_resets(self, servers, kwargs.get("timeout_s"), labels)
        else:
            self._service = ServiceClient(info.rank, servers, info.num_workers,
                                          timeout_s=kwargs.get("timeout_s"), server_labels=labels)
            self._ps_client = int(_native.lib().tfx_ps_client_create(
                self._service.handle, len(servers), info.rank))
        self._mode = mode
        self._tables: list[RemoteTable] = []
        self._table_ids = itertools.count()  # embedding and dense tables, in creation order
        self.dense_placement = dense_placement
        self._dense: dict[int, dense_variables_lib.DenseTable] = {}  # id(variable) -> its table
        self._dense_layout = dense_variables_lib.Placement(len(servers))
        # Saved slots of dense variables whose tables do not exist yet: path -> (record, where).
        self._pending_dense_slots: dict[str, tuple] = {}
        # The step being collected: its pushes (tables' and dense variables') and the dense
        # tables to pull back. Not thread-local: Strategy.run may call the replica
        # function in its own thread.
        self._step = None
        self._closed = False
        atexit.register(self.close_parameter_servers)
        tfc.route_table_gradients()
        tfc.keep_optimizer_extras()

    # -- tables ------------------------------------------------------------------------------

    def create_embedding_table(self, layer) -> RemoteTable:
        """The table of a `ShardedEmbedding` (called when the layer is built)."""
        table = RemoteTable(layer, self._ps_client, table_id=next(self._table_ids),
                            is_chief=lambda: bool(self.should_checkpoint))
        self._tables.append(table)
        return table

    def plain_embedding_building(self, layer) -> bool:
        """A `keras.layers.Embedding` is being built in scope: a table on the servers if the
        partitioner splits it (True: built), else replicated (False; a warning if large)."""
        if partitioned_embeddings.shards_wanted(layer, self._variable_partitioner) > 1:
            partitioned_embeddings.make_server_table(layer)
            return True
        if self._variable_partitioner is None:
            plain_embeddings.warn_if_large(layer)
        return False

    def push_table_gradients(self, optimizer, grads, variables, learning_rate):
        """Pushes the gradients of tables to the servers; returns the other (grad, var) lists.

        Called by Keras's optimizer in each replica, before it all-reduces
        gradients: a table's rows are summed by the servers, not the workers.
        """
        tables, rest_grads, rest_vars = table_gradients.split_table_gradients(grads, variables)
        pushed = []
        for table, grad in tables:
            table.set_optimizer(optimizer)
            op = table.push(grad, learning_rate)
            pushed.append(op)
            if self._step is not None:
                self._step["pushes"].append(op)
        if self._elastic:  # the step's all-reduce waits for its pushes (ps_elastic.pushes_first)
            rest_grads = ps_elastic.pushes_first(rest_grads, pushed)
        if self.dense_placement == "servers":
            rest_grads, rest_vars = self._push_dense_gradients(optimizer, rest_grads, rest_vars,
                                                               learning_rate)
        return rest_grads, rest_vars

    # -- dense variables on the servers ----------------------------------------------------------

    def _push_dense_gradients(self, optimizer, grads, variables, learning_rate):
        """Pushes the dense gradients to the servers; Keras's optimizer gets none of them."""
        step = self._step
        if step is None:
            raise RuntimeError(
                "ParameterServerStrategy(dense_variables='servers'): apply gradients inside "
                "strategy.run (as Keras's fit does), so the step's dense weights can be pulled "
                "back from the servers after it")
        for grad, variable in zip(grads, variables):
            if grad is None:
                continue
            table = self.dense_table(variable, optimizer)
            step["pushes"].append(table.push(grad, learning_rate))
            step["tables"][id(variable)] = table
        return [], []

    def dense_table(self, variable, optimizer) -> dense_variables_lib.DenseTable:
        """The servers' table of ``variable``, created (with its current value) on first use."""
        table = self._dense.get(id(variable))
        if table is None:
            with tf.init_scope():  # values are read and sent eagerly, once
                dense_checkpoint.track_with_optimizer(optimizer, self)
                record, beside = self._pending_dense_slots.pop(variable.path, (None, None))
                table = dense_variables_lib.DenseTable(
                    variable, self._ps_client, next(self._table_ids), self._dense_layout,
                    first_id=record["first_id"] if record else None)
                if record is not None:  # saved rows and slots, restored before training
                    dense_checkpoint.restore_record(table, record, beside)
                # The rule first (another worker may have set it already): the
                # uploaded file's slots must match the servers' table.
                table.set_optimizer(optimizer)
                table.upload(variable.numpy())  # nothing when the servers hold it
                dense_variables_lib.upload_on_eager_assign(variable, table)
            self._dense[id(variable)] = table
        else:
            table.set_optimizer(optimizer)
        return table

    def dense_tables(self) -> list[dense_variables_lib.DenseTable]:
        """The dense variables held by the servers so far, in creation order."""
        return list(self._dense.values())

    def restore_dense_slots(self, records, beside) -> None:
        """Restores saved rows and slots of dense variables (`dense_checkpoint` records); those
        whose tables do not exist yet get them when created."""
        tables = {table.variable.path: table for table in self._dense.values()}
        for record in records:
            table = tables.get(record["variable"])
            if table is None:
                self._pending_dense_slots[record["variable"]] = (record, beside)
            else:
                dense_checkpoint.restore_record(table, record, beside)

    def save_optimizer_extras(self, optimizer, store) -> None:
        """Keras's save of ``optimizer``: the servers' slots of dense variables, beside the file."""
        if self._dense:
            dense_checkpoint.save_to_keras_store(self, store)

    def load_optimizer_extras(self, optimizer, store) -> None:
        dense_checkpoint.load_from_keras_store(self, store)

    def refresh_dense_variables(self, after):
        """Ops that pull this step's dense variables into the workers' caches, after ``after``."""
        tables = list(self._step["tables"].values()) if self._step else []
        updates = []
        with tf.control_dependencies([after] if after is not None else []):
            for table in tables:
                value = table.pull()
                # Through the class: the instance's assign would send it back.
                updates.append(type(table.variable).assign(table.variable, value))
        return updates

    @contextlib.contextmanager
    def collecting_pushes(self):
        """Collects the step's pushes (yielded) and dense tables until the block ends."""
        self._step = {"pushes": [], "tables": {}}
        try:
            yield self._step["pushes"]
        finally:
            self._step = None

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        result = super()._batch_reduce_to(reduce_op, value_destination_pairs, options)
        if self._elastic and self._step is not None:  # the step ends after its all-reduce
            self._step["pushes"].extend(ps_elastic.tensors_of(result))
        return result

    def step_done(self, after=()):
        """The op that ends this worker's step on the servers (if it pushed anything)."""
        with tf.control_dependencies(list(after)):
            return _ops.load_op_library("_ps_ops").tfx_ps_step_done(client_id=self._ps_client)

    def close_parameter_servers(self) -> None:
        """Says goodbye to the servers (they exit once every worker has)."""
        if self._closed:
            return
        self._closed = True
        _native.lib().tfx_ps_client_destroy(self._ps_client)
        self._service.close()


class ParameterServerStrategy(MultiWorkerMirroredStrategy):
    """Data-parallel workers, with `ShardedEmbedding` tables on parameter servers.

    Run the same program on every task of a job whose ``TF_CONFIG`` has ``ps``
    tasks (``tfx-dist-run -n 2 --ps 2 python train.py`` does it locally).

    Example:
    ```python
    strategy = tfx_dist.ParameterServerStrategy()   # on a ps task: serves, then exits
    with strategy.scope():
        ids = keras.Input((3,), dtype="int64")
        x = tfx_dist.layers.ShardedEmbedding(10_000_000, 64, combiner="mean")(ids)
        model = keras.Model(ids, keras.layers.Dense(1, activation="sigmoid")(x))
        model.compile("adagrad", "binary_crossentropy")
    model.fit(dataset, epochs=3)
    ```

    Programs written for TensorFlow's `ParameterServerStrategy` with a
    `ClusterCoordinator` must drop the coordinator: every worker runs the
    training loop itself, as with `MultiWorkerMirroredStrategy`.

    Args:
      cluster_resolver: optional; by default ``TF_CONFIG``.
      mode: ``"sync"`` (each step applies every worker's gradients once) or
        ``"async"`` (each push is applied on arrival).
      dense_variables: where the model's dense (non-table) variables live:
        ``"workers"`` (mirrored, gradients all-reduced among the workers, Keras's
        optimizer applies them) or ``"servers"`` (spread over the servers by
        size, their optimizer applies them; workers push gradients and pull
        weights each step; ``mode="sync"`` only).
      variable_partitioner: as TensorFlow's (``MinSizePartitioner``,
        ``MaxSizePartitioner``, ``FixedShardsPartitioner``), for programs written
        for it: a `keras.layers.Embedding` it splits into several shards becomes a
        table on the servers, as a `tfx_dist.layers.ShardedEmbedding` with the same
        arguments (`strategies.partitioned_embeddings`); other variables are as
        without it. Without a partitioner, a replicated `keras.layers.Embedding`
        of ``TFX_HYBRID_SHARD_MIN_BYTES`` or more gets a warning saying how to shard it.
      devices, timeout_s: as for `tfx_dist.MultiWorkerMirroredStrategy`.

    Raises:
      ValueError: no ``ps`` task in the cluster, a bad ``mode`` or ``dense_variables``.
    """

    def __init__(self, cluster_resolver=None, variable_partitioner=None, *, mode: str = "sync",
                 dense_variables: str = "workers", devices=None, timeout_s=None):
        if mode not in _MODES:
            raise ValueError(f"Expected mode to be one of {_MODES}. Received: mode={mode!r}")
        dense_variables_lib.check_placement(dense_variables, mode)
        info = cluster_lib.resolve(cluster_resolver)
        if not info.ps_addresses:
            raise ValueError(
                "ParameterServerStrategy needs parameter servers: TF_CONFIG's cluster has no \"ps\" "
                f"tasks (received jobs {sorted(info.cluster or {})}). Add them, e.g. "
                "`tfx-dist-run -n 2 --ps 2 ...`, or use tfx_dist.MultiWorkerMirroredStrategy.")
        if info.task_type == "ps":
            sys.exit(server.serve(info, synchronous=mode == "sync", timeout_s=timeout_s,
                                  dense_variables=dense_variables))
        self._reduced_logs = parameter_server_logs.ReducedLogs()
        tf.distribute.Strategy.__init__(self, ParameterServerExtended(
            self, info, mode, dense_placement=dense_variables, cluster_resolver=cluster_resolver,
            devices=devices, timeout_s=timeout_s, variable_partitioner=variable_partitioner))
        # As every other strategy: Keras builds from one replica's slice of the first batch
        # (strings, ragged ids and uneven global batches cannot be averaged across workers).
        tfc.build_from_first_replica(type(self))

    def run(self, fn, args=(), kwargs=None, options=None):
        """`tf.distribute.Strategy.run`, then the end of this worker's step on the servers."""
        reduce_logs = None
        if self.extended._elastic and parameter_server_logs.is_keras_train_step(fn):
            # The logs' all-reduce before the step's end (see parameter_server_logs).
            reduce_logs = functools.partial(self._reduced_logs.reduce_now, self)
        return run_step_on_servers(
            self.extended, lambda: super(ParameterServerStrategy, self).run(
                fn, args=args, kwargs=kwargs, options=options), reduce_logs)

    def reduce(self, reduce_op, value, axis):
        """`tf.distribute.Strategy.reduce`; a Keras log that ``run`` reduced already is not again."""
        reduced = self._reduced_logs.get(reduce_op, value, axis)
        return super().reduce(reduce_op, value, axis) if reduced is None else reduced


def run_step_on_servers(extended: ParameterServerExtended, run, reduce_logs=None):
    """``run()`` (a `Strategy.run`), then the end of this worker's step on the servers (after
    ``reduce_logs(result)``'s tensors, when given)."""
    with extended.collecting_pushes() as pushes:
        result = run()
        if reduce_logs is not None:
            pushes.extend(reduce_logs(result))
        outputs = [t for t in tf.nest.flatten(result, expand_composites=True) if isinstance(t, tf.Tensor)]
        done = extended.step_done(after=pushes + outputs)
        extended.refresh_dense_variables(after=done)
    return result
