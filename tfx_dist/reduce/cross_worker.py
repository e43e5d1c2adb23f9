"""Reductions across the local devices of a process AND across worker processes.

`CrossWorkerOps` is the `tf.distribute.CrossDeviceOps` of
`tfx_dist.MultiWorkerMirroredStrategy`. Every reduction runs in three steps:

1. *local*: the values of this process's replicas are summed on the first
   local device by `FusedAllReduce` (no-op with one device per worker, the
   common CPU case);
2. *cross-process*: the local results go through a *transport* (tfx_dist's
   collectives by default: `CommTransport`) in ONE call per batch of tensors;
3. *broadcast*: the result is copied to the destination devices.

Terms: a *transport* is any object with ``rank``, ``size`` and the three
collectives ``all_reduce(tensors, reduction, name, mean_divisor)``,
``all_gather(tensor, name)`` (concatenates along dim 0; dim 0 may differ
between ranks) and ``broadcast(tensors, root, name)``, each usable eagerly and
inside ``tf.function``.

MEAN: the mean over every replica of the job is the sum over workers divided
by the number of replicas of all of them; the transport's ``"mean"`` divides by
``mean_divisor`` (the runtime, as TensorFlow's ``/`` for floats and ``//`` for
integers). Only what no transport mean produces in its own dtype is divided
here, the same way (`_local_mean`): a job of one worker, the rows of
`tf.IndexedSlices` (gathered, not reduced) and dtypes carried in a wider one.

Ordering: with a transport that matches collectives across ranks by name,
whatever order each rank issues them in (``orders_collectives = True``; the
runtime behind `CommTransport` negotiates the order), the collectives of a
graph are left independent, also of the graph's other stateful ops (which
`tf.function` otherwise runs in program order): those ready together go out
as one fused transfer, and a step's log reductions need not wait for its
gradients. Any other transport needs the same order on every rank, but
TensorFlow runs the independent ops of a graph in any order; so there every
collective waits (control dependency) for the previous collective created in
that graph.
Either way the names come from the order of tracing, which is the same on
every rank (see `_Sequencer`).
"""

from __future__ import annotations

import threading
import weakref

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.reduce.cross_device import FusedAllReduce, reduction_name
from tfx_dist.reduce.dtype_encoding import encode_for_move, encode_for_reduce, reduced_as_is

_SUM = tf.distribute.ReduceOp.SUM


def _local_mean(total, n: int):
    """``total / n`` in its dtype, as the runtime's mean divides (``//`` for integers)."""
    if n == 1:
        return total
    if isinstance(total, tf.IndexedSlices):
        return tf.IndexedSlices(_local_mean(total.values, n), total.indices, total.dense_shape)
    if total.dtype.is_integer:
        return total // tf.cast(n, total.dtype)
    return total / tf.cast(n, total.dtype)


class CommTransport:
    """The transport over tfx_dist's native collectives (`tfx_dist.comm`).

    Args:
      communicator: a ``tfx_dist.comm.Communicator`` joined by every worker.
    """

    # The runtime negotiates which collectives every rank has issued.
    orders_collectives = True

    def __init__(self, communicator):
        from tfx_dist.comm import ops as comm_ops  # imported late: loads the op library

        self._ops = comm_ops
        self.communicator = communicator
        self.rank, self.size = communicator.rank, communicator.size

    @classmethod
    def connect(cls, rank: int, size: int, addresses, timeout_s: float | None = None):
        """Builds the communicator of this worker (blocks until every worker joined); it is the
        process's communicator, the one an elastic reset replaces (`tfx_dist.elastic.membership`)."""
        from tfx_dist.elastic import membership

        return cls(membership.connect(rank, size, list(addresses), timeout_s=timeout_s))

    def all_reduce(self, tensors, reduction="sum", name=None, mean_divisor=0):
        return self._ops.all_reduce(list(tensors), self.communicator, reduction=reduction,
                                    name=name, mean_divisor=mean_divisor)

    def all_gather(self, tensor, name=None):
        return self._ops.all_gather(tensor, self.communicator, name=name)

    def broadcast(self, tensors, root=0, name=None):
        return self._ops.broadcast(list(tensors), self.communicator, root=root, name=name)

    def join(self, name="join"):
        """Horovod's join on the communicator of now (an elastic reset replaces it)."""
        return self.communicator.join(name=name)

    def close(self):
        self.communicator.close()


class _Sequencer:
    """Names, and with ``chain`` orders, the collectives of each graph (see
    the module docstring).

    Names are ``g<graph>.<kind>.<n>``: ``<graph>`` numbers the graphs in the
    order their first collective was traced, ``<n>`` numbers the collectives
    of a graph; eager calls are ``e.<kind>``. Every rank traces and calls
    the same collectives in the same order, so names agree across ranks, and a
    graph's names repeat on every run of it.
    """

    def __init__(self, chain: bool = True):
        self._chain = chain
        self._graphs = weakref.WeakKeyDictionary()  # graph -> [index, count, last output if chained]
        self._num_graphs = 0
        self._lock = threading.Lock()

    def run(self, kind: str, fn):
        """Calls ``fn(name)`` after the previous collective of the current graph."""
        if tf.executing_eagerly():
            return fn(f"e.{kind}")
        graph = tf.compat.v1.get_default_graph()
        with self._lock:
            state = self._graphs.get(graph)
            if state is None:
                state = self._graphs[graph] = [self._num_graphs, 0, None]
                self._num_graphs += 1
            index, count, last = state
            state[1] += 1
        with tf.control_dependencies([last] if last is not None else []):
            out = fn(f"g{index}.{kind}.{count}")
        flat = tf.nest.flatten(out)
        if self._chain:
            if flat:
                state[2] = flat[0]
        else:
            # tf.function would otherwise chain every stateful op (these
            # collectives included) in program order; TensorFlow exempts its
            # own collectives the same way, by op type.
            tfc.run_independently(graph, {t.op for t in flat})
        return out


class CrossWorkerOps(tf.distribute.CrossDeviceOps):
    """All-reduce, gather and broadcast across local devices and worker processes.

    Used by `tfx_dist.MultiWorkerMirroredStrategy`; every worker must hold the
    same number of local replicas. Dense tensors of one ``batch_reduce`` go to
    the transport in one call; `tf.IndexedSlices` are all-gathered (rows and
    indices), which sums them when applied.

    Args:
      transport: the cross-process collectives (see the module docstring).
      host_device: the device that runs the local reduction and the transport
        calls; defaults to the first device of each value.
    """

    def __init__(self, transport, host_device: str | None = None):
        super().__init__()
        self.transport = transport
        self.host_device = host_device
        self._local_ops = FusedAllReduce()
        self._sequencer = _Sequencer(
            chain=not getattr(transport, "orders_collectives", False))

    def restart_naming(self) -> None:
        """Names collectives from the first graph again (after an elastic reset: as a new process does)."""
        self._sequencer = _Sequencer(chain=not getattr(self.transport, "orders_collectives", False))

    @property
    def _num_between_graph_workers(self):
        # More than 1 disables CrossDeviceOps' single-value shortcuts.
        return self.transport.size

    # -- the three steps -------------------------------------------------------------------

    def _device_of(self, values) -> str:
        return self.host_device or values[0].device or "/device:CPU:0"

    def _local_sums(self, per_replica_values):
        """Each value's sum over this process's replicas, all in `FusedAllReduce`'s fused ops."""
        sums = [list(v.values)[0] for v in per_replica_values]
        several = [i for i, v in enumerate(per_replica_values) if len(v.values) > 1]
        if several:
            pairs = [(per_replica_values[i], self._device_of(per_replica_values[i].values))
                     for i in several]
            for i, total in zip(several, self._local_ops.batch_reduce_implementation(
                    _SUM, pairs, None)):
                # One destination: the result itself, or a one-device Mirrored.
                sums[i] = (total.values[0] if isinstance(total, tfc.values_lib.DistributedValues)
                           else total)
        return sums

    def _cross_all_reduce(self, tensors, mean_divisor: int = 0):
        """Sums each tensor of ``tensors`` across workers, or with ``mean_divisor`` divides
        the sums by it (the transport does: one call)."""
        if self.transport.size == 1 or not tensors:
            return [_local_mean(t, mean_divisor or 1) for t in tensors]
        encoded = [encode_for_reduce(tf.convert_to_tensor(t)) for t in tensors]
        sent = [t for t, _ in encoded]
        reduction = "mean" if mean_divisor else "sum"
        with tf.device(self.host_device or "/device:CPU:0"):
            out = self._sequencer.run("all_reduce", lambda name: self.transport.all_reduce(
                sent, reduction, name=name, mean_divisor=mean_divisor))
        return [decode(o) for o, (_, decode) in zip(out, encoded)]

    def _cross_all_gather(self, tensor):
        """Concatenates ``tensor`` of every worker along dim 0, in rank order."""
        if self.transport.size == 1:
            return tensor
        sent, decode = encode_for_move(tf.convert_to_tensor(tensor))
        with tf.device(self.host_device or "/device:CPU:0"):
            out = self._sequencer.run(
                "all_gather", lambda name: self.transport.all_gather(sent, name=name))
        return decode(out)

    def cross_broadcast(self, tensors, root: int = 0):
        """Returns rank ``root``'s ``tensors`` on every worker (used for initial values)."""
        tensors = [tf.convert_to_tensor(t) for t in tensors]
        if self.transport.size == 1 or not tensors:
            return tensors
        encoded = [encode_for_move(t) for t in tensors]
        sent = [t for t, _ in encoded]
        with tf.device(self.host_device or "/device:CPU:0"):
            out = self._sequencer.run(
                "broadcast", lambda name: self.transport.broadcast(sent, root=root, name=name))
        return [decode(o) for o, (_, decode) in zip(out, encoded)]

    def _cross_gather_slices(self, slices: tf.IndexedSlices) -> tf.IndexedSlices:
        rows = self._cross_all_gather(slices.values)
        indices = self._cross_all_gather(tf.cast(slices.indices, tf.int64))
        # In rank order, unmerged: the rows of the global batch, as on one device.
        return tf.IndexedSlices(rows, indices, slices.dense_shape)

    def _to_destinations(self, value, destinations):
        return tfc.cross_device_ops_lib.simple_broadcast(
            value, destinations, always_mirrored=True,
            canonicalize_devices=self._canonicalize_devices)

    # -- CrossDeviceOps --------------------------------------------------------------------

    def reduce_implementation(self, reduce_op, per_replica_value, destinations, options):
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options)[0]

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        mean = reduction_name(reduce_op) == "mean"
        local = self._local_sums([v for v, _ in value_destination_pairs])
        # A mean divides by the replicas of every worker (each has as many as this one).
        replicas = [len(v.values) * self.transport.size for v, _ in value_destination_pairs]
        # One transport call per divisor (a mean's is the job's replicas: one call), and
        # one for the sums, of which means in a dtype carried as another are divided here.
        calls = {}  # mean_divisor (0: a sum) -> indices of the dense values
        for i, t in enumerate(local):
            if not isinstance(t, tf.IndexedSlices):
                by_transport = mean and reduced_as_is(t.dtype)
                calls.setdefault(replicas[i] if by_transport else 0, []).append(i)
        reduced = list(local)
        for divisor, members in calls.items():
            for i, t in zip(members, self._cross_all_reduce([local[i] for i in members], divisor)):
                reduced[i] = _local_mean(t, replicas[i]) if mean and not divisor else t
        for i, t in enumerate(local):
            if isinstance(t, tf.IndexedSlices):
                reduced[i] = self._cross_gather_slices(t)
                if mean:
                    reduced[i] = _local_mean(reduced[i], replicas[i])
        return [self._to_destinations(total, destinations)
                for (_, destinations), total in zip(value_destination_pairs, reduced)]

    def _gather_implementation(self, per_replica_value, destinations, axis, options):
        values = list(per_replica_value.values)
        with tf.device(self._device_of(values)):
            local = values[0] if len(values) == 1 else tf.concat(values, axis=axis)
            rank = local.shape.rank
            if rank == 0:
                raise ValueError(f"Cannot gather a scalar along axis {axis}: "
                                 f"expected a tensor of rank >= 1. Received: {local}")
            axis = axis % rank if rank is not None else axis
            if axis != 0:
                perm = [axis] + [d for d in range(rank) if d != axis]
                local = tf.transpose(local, perm)
        gathered = self._cross_all_gather(local)
        if axis != 0:
            inverse = [0] * rank
            for position, d in enumerate(perm):
                inverse[d] = position
            gathered = tf.transpose(gathered, inverse)
        return self._to_destinations(gathered, destinations)

    def broadcast_implementation(self, tensor, destinations):
        return self._to_destinations(tensor, destinations)
