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
from tfx_dist.comm import naming

__all__ = ["all_reduce", "all_gather", "broadcast"]

_REDUCTIONS = ("sum", "mean", "min", "max")


def _lib():
    return _ops.load_op_library("_comm_ops")


def all_reduce(tensors, communicator, reduction: str = "sum", name: str | None = None) -> list:
    """All-reduces a list of tensors across the processes of ``communicator``.

    Args:
      tensors: tensors of float16, bfloat16, float32, float64, int32 or int64
        (any mix); all tensors of one call are negotiated and fused together.
      communicator: a `tfx_dist.comm.Communicator`.
      reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"`` (integer mean
        truncates).
      name: identifies the call across processes; default derived from the
        graph (see `tfx_dist.comm.naming`).

    Returns:
      A list of tensors, the reductions, with the inputs' shapes and dtypes.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Expected reduction in {_REDUCTIONS}. Received: reduction={reduction!r}")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    out = _lib().tfx_all_reduce(tensors, communicator_id=communicator.handle, reduction=reduction,
                                names=naming.collective_names("allreduce", len(tensors), name),
                                compression=communicator.compression)
    return list(out)


def all_gather(tensor, communicator, name: str | None = None):
    """Concatenates every process's ``tensor`` on dimension 0.

    The first dimension may differ between processes; the others may not.
    """
    tensor = tf.convert_to_tensor(tensor)
    return _lib().tfx_all_gather(tensor, communicator_id=communicator.handle,
                                 names=naming.collective_names("allgather", 1, name))


def broadcast(tensors, communicator, root: int = 0, name: str | None = None) -> list:
    """Every process receives process ``root``'s tensors (same shapes everywhere)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    return list(_lib().tfx_broadcast(tensors, communicator_id=communicator.handle, root=int(root),
                                     names=naming.collective_names("broadcast", len(tensors), name)))
