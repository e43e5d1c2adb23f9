"""TensorFlow ops over a `tfx_dist.comm.Communicator`.

The kernels are asynchronous: they hand the tensors to the communicator's
runtime thread and return, so no TensorFlow executor thread waits for other
processes. Every process must run the same collectives (same names, dtypes,
shapes); the runtime negotiates the order, so the order in which TensorFlow
happens to run independent collectives does not matter.

Example (in every process, with a `Communicator` ``comm``)::

    @tf.function
    def step(grads):
        return all_reduce(grads, comm, reduction="mean", name="grads")
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _ops
from tfx_dist.comm import _native, interrupts, naming

__all__ = ["all_reduce", "all_gather", "broadcast", "all_to_all", "reduce_scatter"]

_REDUCTIONS = ("sum", "mean", "min", "max")


def _lib():
    return _Interruptible(_ops.load_op_library("_comm_ops"))


class _Interruptible:
    """The op library, whose eager calls raise a collective that Ctrl-C
    interrupted (tf.errors.CancelledError from the runtime) as
    KeyboardInterrupt naming it (see tfx_dist.comm.interrupts)."""

    def __init__(self, lib):
        self._lib = lib

    def __getattr__(self, name):
        op = getattr(self._lib, name)

        def call(*args, **kwargs):
            try:
                return op(*args, **kwargs)
            except tf.errors.CancelledError:
                message = interrupts.take_message()
                if message:
                    raise KeyboardInterrupt(message) from None
                raise
        return call


def all_reduce(tensors, communicator, reduction: str = "sum", name: str | None = None,
               mean_divisor: int = 0) -> list:
    """All-reduces a list of tensors across the processes of ``communicator``.

    Args:
      tensors: tensors of float16, bfloat16, float32, float64, int32 or int64
        (any mix); all tensors of one call are negotiated and fused together.
      communicator: a `tfx_dist.comm.Communicator`.
      reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``. The mean divides
        as TensorFlow's ``/`` (floats) and ``//`` (integers, rounding down).
      name: identifies the call across processes; default derived from the
        graph (see `tfx_dist.comm.naming`).
      mean_divisor: what the mean divides the sum by (e.g. the replicas of
        every process); 0: the number of processes. The same on every process.

    Returns:
      A list of tensors, the reductions, with the inputs' shapes and dtypes.
      Differentiable for ``"sum"`` and ``"mean"``: the gradient is the same
      reduction of the outputs' gradients.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Expected reduction in {_REDUCTIONS}. Received: reduction={reduction!r}")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    out = _lib().tfx_all_reduce(tensors, communicator_id=communicator.handle, reduction=reduction,
                                names=naming.collective_names("allreduce", len(tensors), name),
                                compression=communicator.compression, mean_divisor=mean_divisor)
    return list(out)


def all_gather(tensor, communicator, name: str | None = None):
    """Concatenates every process's ``tensor`` on dimension 0.

    The first dimension may differ between processes; the others may not.
    Differentiable: the gradient is this process's rows of the sum over
    processes of the output's gradient.
    """
    tensor = tf.convert_to_tensor(tensor)
    _remember_rank(communicator)
    return _lib().tfx_all_gather(tensor, communicator_id=communicator.handle,
                                 names=naming.collective_names("allgather", 1, name))


def broadcast(tensors, communicator, root: int = 0, name: str | None = None) -> list:
    """Every process receives process ``root``'s tensors (same shapes everywhere).

    Differentiable: the root's gradient is the sum over processes of the
    outputs' gradients; the other processes' is zero.
    """
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    _remember_rank(communicator)
    return list(_lib().tfx_broadcast(tensors, communicator_id=communicator.handle, root=int(root),
                                     names=naming.collective_names("broadcast", len(tensors), name)))


def all_to_all(tensor, splits, communicator, name: str | None = None):
    """All-to-all with splits, as Horovod's ``hvd.alltoall(tensor, splits)``.

    Rows ``[off_j, off_j + splits[j])`` of ``tensor`` go to process j
    (``off_j`` = the sum of the splits before j); every process receives what
    each process sent it, concatenated in rank order. Trailing dimensions and
    dtype must agree across processes (else `CollectiveMismatchError` /
    ``FailedPreconditionError`` on every process); the splits may differ.
    Differentiable: the gradient of ``output`` goes back by an all-to-all
    with ``received_splits`` as its splits.

    Example (every process; ``ids`` routed to the process that owns them)::

        owner = ids % comm.size
        order = tf.argsort(owner)
        splits = tf.math.bincount(owner, minlength=comm.size, maxlength=comm.size)
        mine, counts = all_to_all(tf.gather(ids, order), splits, comm)

    Args:
      tensor: a tensor of rank >= 1 with ``sum(splits)`` rows (float16,
        bfloat16, float32, float64, int32, int64, uint8).
      splits: int32 or int64 vector, one non-negative count per process
        (may be computed in the graph).
      communicator: a `tfx_dist.comm.Communicator`.
      name: identifies the call across processes; default derived from the
        graph (see `tfx_dist.comm.naming`).

    Returns:
      ``(output, received_splits)``: ``output`` has the input's trailing
      shape and a dynamic first dimension; ``received_splits`` is int64 of
      length ``communicator.size``, the rows from each process.

    Raises:
      InvalidArgumentError: splits of the wrong length, negative or not
        summing to the first dimension (this process only).
    """
    tensor = tf.convert_to_tensor(tensor)
    splits = tf.convert_to_tensor(splits)
    if splits.dtype not in (tf.int32, tf.int64):
        raise TypeError(f"Expected `splits` of dtype int32 or int64. Received: splits.dtype={splits.dtype}")
    output, received = _lib().tfx_all_to_all(tensor, splits, communicator_id=communicator.handle,
                                             names=naming.collective_names("alltoall", 1, name))
    return output, received


def reduce_scatter(tensor, communicator, reduction: str = "sum", name: str | None = None):
    """Reduce-scatter, as Horovod's ``hvd.reducescatter``.

    Process r receives the reduction over processes of block r of
    dimension 0. Blocks are as even as possible, the first
    ``shape[0] % size`` processes getting one row more: process r gets
    ``shape[0] // size + (r < shape[0] % size)`` rows: Horovod's convention
    (``ReducescatterOp::ComputeOutputShapeForRank`` in
    horovod/common/ops/collective_operations.cc; its docs say only that dim 0
    "will be divided across the different Horovod processes"). Unlike
    ``hvd.reducescatter`` (default ``op=Average``) the default here is
    ``"sum"``. Every process passes the same shape and dtype.

    Args:
      tensor: a tensor of rank >= 1 (float16, bfloat16, float32, float64,
        int32, int64).
      communicator: a `tfx_dist.comm.Communicator`.
      reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"``.
      name: identifies the call across processes.

    Returns:
      This process's block of the reduction (dynamic first dimension).
      Differentiable for ``"sum"`` and ``"mean"``: the gradient is the
      all-gather of the output's gradient (divided by size for the mean).
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Expected reduction in {_REDUCTIONS}. Received: reduction={reduction!r}")
    tensor = tf.convert_to_tensor(tensor)
    return _lib().tfx_reduce_scatter(tensor, communicator_id=communicator.handle, reduction=reduction,
                                     names=naming.collective_names("reducescatter", 1, name))


# The gradients are the derivatives of what the collectives compute. Each
# names its collectives after the forward op's names, so every process that
# ran the same forward collective makes the same backward ones.
# (tfx_dist.horovod rescales some of them to Horovod's definitions.)
_ranks = {}  # communicator handle -> this process's rank, for the gradients


def _remember_rank(communicator):
    _ranks[communicator.handle] = communicator.rank


def _rank_of(comm_id):
    if comm_id not in _ranks:
        raise LookupError(f"the gradient of a collective on communicator {comm_id} needs this process's "
                          "rank, known once this process has called all_gather or broadcast on it")
    return _ranks[comm_id]


def _text(value):
    return value.decode() if isinstance(value, bytes) else value


def _grad_names(op, suffix="grad"):
    return [f"{_text(n)}/{suffix}" for n in op.get_attr("names")]


def _dense(grads, outputs):
    """Unconnected outputs' gradients as zeros: every process must send every tensor."""
    return [tf.zeros_like(o) if g is None else tf.convert_to_tensor(g) for g, o in zip(grads, outputs)]


@tf.RegisterGradient("TfxAllReduce")
def _all_reduce_grad(op, *grads):
    """A sum's or mean's gradient is the same reduction of the outputs' gradients."""
    reduction = _text(op.get_attr("reduction"))
    if reduction not in ("sum", "mean"):
        raise LookupError(f"tfx_dist.comm.ops.all_reduce has no gradient for reduction={reduction!r} "
                          "(only 'sum' and 'mean')")
    return list(_lib().tfx_all_reduce(
        _dense(grads, op.outputs), communicator_id=op.get_attr("communicator_id"), reduction=reduction,
        names=_grad_names(op), compression=_text(op.get_attr("compression"))))


@tf.RegisterGradient("TfxAllGather")
def _all_gather_grad(op, grad):
    """This process's rows of the sum over processes of the output's gradient."""
    comm_id = op.get_attr("communicator_id")
    (name,) = _grad_names(op)
    total = _lib().tfx_all_reduce([tf.convert_to_tensor(grad)], communicator_id=comm_id, reduction="sum",
                                  names=[name + "/0"])[0]
    rows = tf.shape(op.inputs[0], out_type=tf.int64)[:1]
    every = _lib().tfx_all_gather(rows, communicator_id=comm_id, names=[name + ".rows"])
    rank = _rank_of(comm_id)
    start = tf.reduce_sum(every[:rank])
    return total[start:start + every[rank]]


@tf.RegisterGradient("TfxBroadcast")
def _broadcast_grad(op, *grads):
    """The root's input reaches every output: its gradient is the sum of theirs; the others' is zero."""
    comm_id = op.get_attr("communicator_id")
    total = _lib().tfx_all_reduce(_dense(grads, op.outputs), communicator_id=comm_id, reduction="sum",
                                  names=_grad_names(op))
    if _rank_of(comm_id) == op.get_attr("root"):
        return list(total)
    with tf.control_dependencies(total):  # in a graph, zeros of a known shape would not run the reduce
        return [tf.zeros_like(t) for t in total]


@tf.RegisterGradient("TfxAllToAll")
def _all_to_all_grad(op, grad, _received_grad):
    """The output's gradient goes back by an all-to-all with the received splits as its splits."""
    back, _ = _lib().tfx_all_to_all(grad, op.outputs[1], communicator_id=op.get_attr("communicator_id"),
                                    names=_grad_names(op))
    return back, None


@tf.RegisterGradient("TfxReduceScatter")
def _reduce_scatter_grad(op, grad):
    """Every process's block gradient, gathered (divided by size for the mean)."""
    reduction = _text(op.get_attr("reduction"))
    if reduction not in ("sum", "mean"):
        raise LookupError(f"tfx_dist.comm.ops.reduce_scatter has no gradient for reduction={reduction!r} "
                          "(only 'sum' and 'mean')")
    comm_id = op.get_attr("communicator_id")
    full = _lib().tfx_all_gather(grad, communicator_id=comm_id, names=_grad_names(op))
    if reduction == "mean":
        full = full / tf.cast(_native.lib().tfx_comm_size(comm_id), grad.dtype)
    return full
