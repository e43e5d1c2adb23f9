"""How collectives are named: the one rule, for the numpy API and the TF ops.

Ranks match collectives by name, so every rank must make the same names for
the same calls. A call's *group* name is

* the ``name`` the caller passed, if any;
* in a traced TensorFlow function: ``<graph name>/<kind>`` made unique in the
  graph (``graph.unique_name``), the same on every rank that traces the same
  program;
* otherwise ``<scope>.<kind>.<n>``, ``n`` counting the calls of that scope:
  ``numpy`` (per communicator) or ``eager`` (per process). Ranks must then
  make the same calls in the same order.

Each tensor of the call is ``<group>/<i>``, except the single tensor of an
all-gather, all-to-all or reduce-scatter, which is ``<group>``. The runtime appends ``#<occurrence>`` (how
many times this rank has used the name before), so a name may be reused
call after call.
"""

from __future__ import annotations

import itertools
import threading

__all__ = ["collective_names"]

_lock = threading.Lock()
_SINGLE_TENSOR_KINDS = ("allgather", "alltoall", "reducescatter")
_eager_counter = itertools.count()


def group_name(kind: str, name: str | None = None, counter=None) -> str:
    """The group name of one call of collective ``kind`` (see the module docstring).

    Args:
      kind: ``"allreduce"``, ``"allgather"``, ``"broadcast"``, ``"alltoall"``,
        ``"reducescatter"``.
      name: the caller's name for the call, or None.
      counter: for the numpy API, the communicator's ``itertools.count``;
        None for TensorFlow ops (graph name, or the process-wide eager count).
    """
    if name:
        return name
    if counter is not None:
        with _lock:
            return f"numpy.{kind}.{next(counter)}"
    import tensorflow as tf  # only the TF ops come here

    if tf.executing_eagerly():
        with _lock:
            return f"eager.{kind}.{next(_eager_counter)}"
    graph = tf.compat.v1.get_default_graph()
    return f"{graph.name}/{graph.unique_name(kind, mark_as_used=True)}"


def tensor_names(kind: str, group: str, count: int) -> list[str]:
    """The names of the ``count`` tensors of a call named ``group``."""
    if kind in _SINGLE_TENSOR_KINDS:
        return [group]
    return [f"{group}/{i}" for i in range(count)]


def collective_names(kind: str, count: int, name: str | None = None, counter=None) -> list[str]:
    """The names of the ``count`` tensors of one call: the one function every caller uses."""
    return tensor_names(kind, group_name(kind, name, counter), count)
