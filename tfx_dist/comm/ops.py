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

import itertools
import threading

import tensorflow as tf

from tfx_dist import _ops

__all__ = ["all_reduce", "all_gather", "broadcast"]

_REDUCTIONS = ("sum", "mean", "min", "max")
_eager_counter = itertools.count()
_lock = threading.Lock()


def _lib():
    return _ops.load_op_library("_comm_ops")


def _group_name(kind: str, name: str | None) -> str:
    """The name the ranks match this collective by (same on every rank).

    In a traced function: the graph's name plus a name unique in the graph,
    which is the same on every rank that traces the same program. Eagerly: a
    process-wide counter (ranks must make the same eager calls in the same
    order). Pass ``name`` to choose it explicitly.
    """
    if name:
        return name
    if tf.executing_eagerly():
        with _lock:
            return f"eager/{kind}.{next(_eager_counter)}"
    graph = tf.compat.v1.get_default_graph()
    return f"{graph.name}/{graph.unique_name(kind, mark_as_used=True)}"


def all_reduce(tensors, communicator, reduction: str = "sum", name: str | None = None) -> list:
    """All-reduces a list of tensors across the processes of ``communicator``.

    Args:
      tensors: tensors of float16, bfloat16, float32, float64, int32 or int64
        (any mix); all tensors of one call are negotiated and fused together.
      communicator: a `tfx_dist.comm.Communicator`.
      reduction: ``"sum"``, ``"mean"``, ``"min"`` or ``"max"`` (integer mean
        truncates).
      name: identifies the call across processes; default derived from the
        graph (see ``_group_name``).

    Returns:
      A list of tensors, the reductions, with the inputs' shapes and dtypes.
    """
    if reduction not in _REDUCTIONS:
        raise ValueError(f"Expected reduction in {_REDUCTIONS}. Received: reduction={reduction!r}")
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    out = _lib().tfx_all_reduce(tensors, communicator_id=communicator.handle, reduction=reduction,
                                group_name=_group_name("allreduce", name),
                                compression=communicator.compression)
    return list(out)


def all_gather(tensor, communicator, name: str | None = None):
    """Concatenates every process's ``tensor`` on dimension 0.

    The first dimension may differ between processes; the others may not.
    """
    tensor = tf.convert_to_tensor(tensor)
    return _lib().tfx_all_gather(tensor, communicator_id=communicator.handle,
                                 group_name=_group_name("allgather", name))


def broadcast(tensors, communicator, root: int = 0, name: str | None = None) -> list:
    """Every process receives process ``root``'s tensors (same shapes everywhere)."""
    tensors = [tf.convert_to_tensor(t) for t in tensors]
    if not tensors:
        return []
    return list(_lib().tfx_broadcast(tensors, communicator_id=communicator.handle, root=int(root),
                                     group_name=_group_name("broadcast", name)))
