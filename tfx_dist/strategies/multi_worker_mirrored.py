"""Synchronous data-parallel training over several worker processes, for Keras 3.

`tfx_dist.MultiWorkerMirroredStrategy` is a drop-in for
`tf.distribute.MultiWorkerMirroredStrategy` (it IS one: Keras reduces its logs
across workers only for instances of that class) that moves tensors between
processes with tfx_dist's own collectives instead of TensorFlow's gRPC
collective runtime, which it never starts.

Why TensorFlow's own strategy fails under Keras 3 (keras-team/keras#20585,
tensorflow#72388): Keras 3's ``fit`` first builds the model from one batch,
``strategy.reduce("MEAN", (x, y), axis=None)``, passing a *tuple* of
per-replica values. ``Strategy.reduce`` does not accept nested values ("TODO:
support `value` being a nest" in TensorFlow); ``MirroredStrategy`` gets away
with it because its reduce maps over the nest, but the multi-worker reduce
hands the tuple to ``CollectiveAllReduce.reduce``, which tries to convert it
to one tensor: "Attempt to convert a value (PerReplica: ...) ... to a Tensor".
Past that, the first train step fails too: for a multi-worker strategy Keras
averages every log value with ``strategy.reduce("MEAN", v, axis=0)``, and the
logs are scalars: "Invalid reduction dimension 0 for input with 0 dimensions"
(seen with TensorFlow's strategy patched to map its reduce over nests). This
strategy's ``reduce`` accepts nests and reduces scalars across replicas
whatever the axis.

Checkpoints follow TensorFlow's convention: every worker saves (saving may
run collectives), the chief to the real path and the others elsewhere. With
several workers the strategy makes saves wait for the chief's files and
Keras's file-writing callbacks write the chief's files only (see
`tfx_dist.checkpointing` and `tfx_dist._tf_compat.keras_callbacks`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist import checkpointing, save_agreement
from tfx_dist import cluster as cluster_lib
from tfx_dist._tf_compat import keras_callbacks, keras_calls
# The checkpoint helpers lived here before tfx_dist.checkpointing: old imports keep working.
from tfx_dist.checkpointing import (BackupAndRestore, remove_temp_dirpath,  # noqa: F401
                                    write_dirpath, write_filepath)
from tfx_dist.input import array_order, input_balance, step_counts
from tfx_dist.reduce.cross_worker import CommTransport, CrossWorkerOps
from tfx_dist.input.strategy_input import StrategyInput
from tfx_dist.strategies.uneven_batches import ReplicaLossShares
from tfx_dist.elastic import membership
from tfx_dist.strategies import elastic_swap, moving_statistics, step_failures, variable_order


class _SingleProcessTransport:
    """The transport of a job of one worker: nothing crosses a process boundary."""

    rank, size = 0, 1

    def all_reduce(self, tensors, reduction="sum", name=None, mean_divisor=0):
        return list(tensors)

    def all_gather(self, tensor, name=None):
        return tensor

    def broadcast(self, tensors, root=0, name=None):
        return list(tensors)

    def close(self):
        pass


def _local_devices(devices):
    if devices:
        return tuple(devices)
    gpus = tf.config.list_logical_devices("GPU")
    if gpus:
        return tuple(d.name for d in gpus)
    return ("/device:CPU:0",)


def _cluster_resolver_for(info: cluster_lib.ClusterInfo):
    cluster = info.cluster_dict() or {}
    return tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster), task_type=info.task_type, task_id=info.task_index,
        rpc_layer=info.rpc_layer)


class MultiWorkerMirroredExtended(ReplicaLossShares, StrategyInput, save_agreement.WorkerAgreement,
                                  tfc.collective_all_reduce_strategy.CollectiveAllReduceExtended):
    """The `tf.distribute.StrategyExtended` of `MultiWorkerMirroredStrategy`.

    It keeps TensorFlow's input pipeline (per-worker sharding, partial
    batches), variable mirroring and replica bookkeeping, and replaces every
    reduction, gather and initial-value broadcast with `CrossWorkerOps`. It
    skips the input pipeline's per-step "has data" all-reduce where no worker
    can run out first (`input_balance`). Uneven batches as on one device
    (`tfx_dist.strategies.uneven_batches`): each step sums the workers' rows in one small
    all-reduce.
    """

    def __init__(self, container_strategy, cluster_resolver=None, communication_options=None,
                 devices=None, transport=None, timeout_s=None, cluster_info=None):
        # Not CollectiveAllReduceExtended.__init__: it starts TensorFlow's gRPC
        # server and collective runtime.
        tfc.distribute_lib.StrategyExtendedV1.__init__(self, container_strategy)
        # A strategy that already resolved its cluster passes it down: resolved once per strategy.
        info = cluster_info if cluster_info is not None else cluster_lib.resolve(cluster_resolver)
        if not info.in_allreduce_group:
            raise ValueError(
                f"MultiWorkerMirroredStrategy runs on the chief and the workers of a job. "
                f"Received: task_type={info.task_type!r} (a {info.task_type!r} task does not "
                f"train; do not create this strategy there).")
        self._cluster_info = info
        local_devices = _local_devices(devices)
        worker_device = tfc.device_util.canonicalize("/device:CPU:0")
        self._elastic = transport is None and membership.elastic()
        if self._elastic:  # the driver says this worker's rank and the number of workers
            transport = CommTransport.connect(info.rank, info.num_workers, info.worker_addresses or (),
                                              timeout_s=timeout_s)
            info = self._cluster_info = elastic_swap.member_info(info, membership.generation())
            elastic_swap.follow_resets(self)
        if transport is None:
            transport = self._connect(info, timeout_s)
        if (transport.rank, transport.size) != (info.rank, info.num_workers):
            raise ValueError(
                f"The transport does not match the cluster: it is rank {transport.rank} of "
                f"{transport.size}, the cluster says rank {info.rank} of {info.num_workers}.")
        self._transport = transport
        # Variables created so far with an order check (`_check_same_variable`);
        # the position names the variable in that check's errors.
        self._variables_created = 0
        # What TensorFlow's __init__ would set, with our CrossDeviceOps for every reduction.
        tfc.init_collective_extended(
            self, cluster_resolver=cluster_resolver or _cluster_resolver_for(info), info=info,
            local_devices=local_devices, worker_device=worker_device,
            cross_device_ops=CrossWorkerOps(transport, host_device=worker_device),
            communication_options=(communication_options
                                   or tf.distribute.experimental.CommunicationOptions()))
        if info.num_workers > 1:
            # Saves return once the chief's files are complete (see checkpointing);
            # Keras's callbacks write the real files on the chief only (keras_callbacks).
            checkpointing.register_strategy(container_strategy)
            checkpointing.install_save_barrier()
            if hasattr(transport, "communicator"):  # a save on the chief alone completes
                save_agreement.join_at_exit(transport)
            keras_callbacks.install()
            keras_calls.install(container_strategy)  # collectives never pair across calls
        tf.get_logger().info(
            "tfx_dist.MultiWorkerMirroredStrategy: rank %d of %d, task %s:%d, local devices %r",
            info.rank, info.num_workers, info.task_type, info.task_index, local_devices)

    @staticmethod
    def _connect(info, timeout_s):
        if info.num_workers == 1:
            return _SingleProcessTransport()
        if not info.worker_addresses:
            raise ValueError(
                f"MultiWorkerMirroredStrategy needs the address of every worker to connect them, "
                f"but the cluster was resolved from {info.source.value}, which gives none. "
                f"Set TF_CONFIG (e.g. with `tfx-dist-run -n N ...`) or pass a cluster_resolver.")
        return CommTransport.connect(info.rank, info.num_workers, info.worker_addresses,
                                     timeout_s=timeout_s)

    def _create_variable(self, next_creator, **kwargs):
        # BatchNormalization's moving statistics: one value on every worker (moving_statistics).
        return super()._create_variable(next_creator, **moving_statistics.averaged(kwargs))

    # -- no TensorFlow collective runtime ----------------------------------------------------

    def _use_merge_call(self):
        return True

    def _get_cross_device_ops(self, value):
        return self._cross_device_ops

    def _configure(self, session_config=None, cluster_spec=None, task_type=None, task_id=None):
        if cluster_spec:
            raise NotImplementedError(
                "tfx_dist.MultiWorkerMirroredStrategy takes its cluster at construction; "
                "it cannot be reconfigured (TF1 distribute coordinator).")

    def _replica_ctx_all_reduce(self, reduce_op, value, options=None):
        # Through merge_call: one batch of cross-process collectives for all replicas.
        return tfc.distribute_lib.StrategyExtendedV2._replica_ctx_all_reduce(
            self, reduce_op, value, options)

    # -- input ---------------------------------------------------------------------------------

    def _experimental_distribute_dataset(self, dataset, options):
        # Keras's shuffled NumPy input: one order on every worker, recomputed by a resume.
        dataset = array_order.same_order_on_every_worker(
            dataset, self._chief_value if self._num_workers > 1 else int)
        distributed = super()._experimental_distribute_dataset(dataset, options)
        if self._num_workers > 1 and input_balance.same_batch_count_on_every_worker(dataset):
            # No worker can run out before the others: skip TF's per-step
            # "has data" all-reduce (see input_balance).
            tfc.skip_partial_batch_check(distributed)
            tfc.check_partial_batches_locally(type(self._container_strategy()))
        return distributed

    # -- variables start equal on every worker -------------------------------------------------

    def _get_variable_creator_initial_value(self, replica_id, device, primary_var, **kwargs):
        if replica_id != 0:  # other local replicas copy the first one
            return tfc.mirrored_strategy.MirroredExtended._get_variable_creator_initial_value(
                self, replica_id=replica_id, device=device, primary_var=primary_var, **kwargs)

        def initial_value_fn():
            with tf.device(device):
                initial_value = kwargs["initial_value"]
                if callable(initial_value):
                    initial_value = initial_value()
                if isinstance(initial_value, tfc.trackable_base.CheckpointInitialValue):
                    initial_value = initial_value.wrapped_value
                initial_value = tf.convert_to_tensor(initial_value, dtype=kwargs.get("dtype"))
                if self._num_workers == 1 or self._elastic:  # elastic: the state's broadcast
                    return initial_value
                if tf.executing_eagerly():  # graphs pair their collectives by trace order
                    self._check_same_variable(kwargs.get("name"), initial_value)
                (value,) = self._cross_device_ops.cross_broadcast([initial_value], root=0)
                return value

        return initial_value_fn

    def _chief_value(self, value: int) -> int:
        """The chief's ``value`` (an int64), on every worker."""
        (chief,) = self._cross_device_ops.cross_broadcast([tf.constant(value, tf.int64)], root=0)
        return int(chief.numpy())

    def _check_same_variable(self, name, initial_value):
        """Fails on every worker unless all are creating the same variable (see variable_order)."""
        self._variables_created += 1
        position = self._variables_created
        variable_order.check_same_variable(
            self._cross_device_ops._cross_all_gather, self._cross_device_ops.transport.rank,
            variable_order.describe(position, name, initial_value))

    def _global_rows(self, local_rows):
        if self._num_workers == 1:
            return local_rows
        (total,) = self._cross_device_ops._cross_all_reduce(  # pylint: disable=protected-access
            [tf.reshape(local_rows, [1])])
        return tf.reshape(total, [])

    # -- reductions ----------------------------------------------------------------------------

    def _reduce_to(self, reduce_op, value, destinations, options):
        def reduce_one(v):
            if tfc.distribute_utils.is_mirrored(v):
                if reduce_op == tf.distribute.ReduceOp.MEAN:
                    return v
                raise ValueError(f"Cannot {reduce_op} a Mirrored value across replicas: it holds "
                                 f"one value, copied to every replica. Received: {v}")
            if not isinstance(v, tf.distribute.DistributedValues) and self._num_workers == 1:
                return tfc.cross_device_ops_lib.reduce_non_distributed_value(
                    reduce_op, v, destinations, len(self.worker_devices))
            # A plain tensor counts as this worker's one value.
            v, to = self._one_value(v, destinations)
            return self._cross_device_ops.reduce(
                reduce_op, v, destinations=to,
                options=self._communication_options.merge(options))

        return tf.nest.map_structure(reduce_one, value)

    def _one_value(self, value, destinations):
        """``(value, destinations)`` as the cross-device ops take a value this worker holds once.

        A Keras variable (a metric whose ``result()`` is its variable) becomes a tensor, and a
        tensor without a device (read in a function outside any device scope) goes to this
        worker's first device, rather than failing for want of a device.
        """
        if isinstance(value, tf.distribute.DistributedValues):
            return value, destinations
        if not isinstance(value, (tf.Tensor, tf.IndexedSlices)):  # sparse gradients stay sparse
            value = tf.convert_to_tensor(value)
        device = destinations if isinstance(destinations, str) else getattr(destinations, "device", None)
        if not device and not isinstance(destinations, tf.distribute.DistributedValues):
            destinations = value.device or self.worker_devices[0]
        return value, destinations

    def _batch_reduce_to(self, reduce_op, value_destination_pairs, options):
        value_destination_pairs = [self._one_value(v, d) for v, d in value_destination_pairs]
        return self._cross_device_ops.batch_reduce(
            reduce_op, value_destination_pairs,
            options=self._communication_options.merge(options))

    def _gather_to_implementation(self, value, destinations, axis, options):
        return self._cross_device_ops._gather(  # pylint: disable=protected-access
            value, destinations=destinations, axis=axis,
            options=self._communication_options.merge(options))

    # -- helpers for callbacks and checkpoints -------------------------------------------------

    def barrier(self) -> None:
        """Returns once every worker has called it (a tiny all-reduce)."""
        if self._num_workers > 1:
            out = self._cross_device_ops._cross_all_reduce([tf.zeros([1], tf.int32)])
            out[0].numpy()

    def rows_of_workers(self, row) -> np.ndarray:
        """Every worker's ``row`` of ints, by rank (zeros for a worker whose program has ended)."""
        return save_agreement.rows_by_sum(
            lambda rows: self._cross_device_ops._cross_all_reduce([tf.constant(rows)])[0].numpy(),
            self._transport.rank, self._num_workers, row)

    def check_same_step_count(self, steps) -> None:
        """Before a Keras loop: fails on every worker if their numbers of batches differ."""
        if self._num_workers > 1:
            step_counts.check_same_step_count(self.rows_of_workers, steps)

    def step_failed(self, error) -> None:
        """A Keras step raised ``error`` here: if the others are left waiting, fail them now."""
        if self._num_workers > 1:
            communicator = getattr(self._transport, "communicator", None)
            broken = communicator is not None and communicator.broken_code() != 0
            step_failures.close_after_failed_step(error, self._transport.rank, self._transport.close, broken)

    def __deepcopy__(self, memo):
        raise ValueError("tfx_dist.MultiWorkerMirroredStrategy holds open connections to the "
                         "other workers and cannot be deep-copied.")


def _rank_of_leaf(value):
    if isinstance(value, tf.distribute.DistributedValues):
        value = value.values[0]
    shape = getattr(value, "shape", None)
    if shape is None:
        return tf.convert_to_tensor(value).shape.rank
    return tf.TensorShape(shape).rank


class MultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """Data-parallel training over several worker processes, on tfx_dist's collectives.

    A drop-in for `tf.distribute.MultiWorkerMirroredStrategy`: run the same
    program on every worker with ``TF_CONFIG`` set (the launcher does it:
    ``tfx-dist-run -n 2 python train.py``). Variables are created equal on every
    worker (the chief's initial values are broadcast), gradients are summed
    across all replicas of all workers each step, and datasets are sharded per
    worker like TensorFlow's strategy does. TensorFlow's gRPC server is never
    started: the addresses in ``TF_CONFIG`` are used by tfx_dist's transport.

    Example:
    ```python
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(10)])
        model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync)
    ```

    Args:
      cluster_resolver: optional `tf.distribute.cluster_resolver.ClusterResolver`;
        by default the job is read from ``TF_CONFIG`` (see `tfx_dist.cluster.resolve`).
      communication_options: accepted for compatibility; tfx_dist's transport
        takes no per-call options.
      devices: the local devices of this worker (default: every GPU, else the
        CPU). Every worker must have the same number.
      transport: the cross-process collectives (see `tfx_dist.reduce.cross_worker`);
        by default a `tfx_dist.comm.Communicator` over the workers' addresses.
      timeout_s: how long a collective may wait for the other workers before
        failing (default: the transport's default).

    Raises:
      ValueError: this task is a ``ps`` or ``evaluator`` task, or the job has no
        worker addresses to connect to.
    """

    def __init__(self, cluster_resolver=None, communication_options=None, *, devices=None,
                 transport=None, timeout_s=None):
        # Not CollectiveAllReduceStrategy.__init__: it builds TensorFlow's extended.
        tfc.distribute_lib.Strategy.__init__(self, MultiWorkerMirroredExtended(
            self, cluster_resolver=cluster_resolver,
            communication_options=communication_options, devices=devices,
            transport=transport, timeout_s=timeout_s))
        tfc.build_from_first_replica(type(self))

    def reduce(self, reduce_op, value, axis):
        """`tf.distribute.Strategy.reduce`, also for nests and scalars.

        ``value`` may be a nested structure (each leaf is reduced), and a scalar
        leaf is reduced across replicas whatever ``axis`` says (it has no axis
        to reduce). Keras 3 relies on both.
        """
        leaves = tf.nest.flatten(value)
        if len(leaves) == 1 and leaves[0] is value:
            if axis is not None and _rank_of_leaf(value) == 0:
                axis = None
            return super().reduce(reduce_op, value, axis)
        return tf.nest.map_structure(lambda v: self.reduce(reduce_op, v, axis), value)

    @property
    def cluster_info(self) -> cluster_lib.ClusterInfo:
        """Where this worker sits in the job (rank, number of workers, chief or not)."""
        return self.extended._cluster_info

    def barrier(self) -> None:
        """Returns once every worker has called it."""
        self.extended.barrier()
