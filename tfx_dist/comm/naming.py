"""How collectives are named: the one rule, for the numpy API and the TF ops.

Ranks match collectives by name, so every rank must make the same names for
the same calls. A call's *group* name is

* the ``name`` the caller passed, if any;
* in a traced TensorFlow function: ``<graph name>/<kind>`` made unique in the
  graph (``graph.unique_name``), the same on every rank that traces the same
  program;
* eagerly: ``eager.<kind>``, the same for every call, so that TensorFlow
  caches one kernel per kind (a name is an op attribute: a name per call
  would cache a kernel per call, forever);
* numpy API: ``numpy.<kind>.<n>``, ``n`` counting the communicator's calls.

A name may be reused call after call: the runtime pairs each rank's k-th
request of a name with every other rank's k-th, and drops a name's state when
its last request completes. Eager and numpy calls without a name must
therefore be made by every rank in the same order. A traced function's names
are the same in every call of it, so each request also carries the label of
the Keras call it belongs to (``calls.py``: "predict call 2"), compared like
the shape: the k-th requests of a name from different calls fail, naming
both, instead of pairing.

Each tensor of the call is ``<group>/<i>``, except the single tensor of an
all-gather, all-to-all or reduce-scatter, which is ``<group>``.
"""

from __future__ import annotations

import threading

__all__ = ["collective_names"]

_lock = threading.Lock()
_SINGLE_TENSOR_KINDS = ("allgather", "alltoall", "reducescatter")


def group_name(kind: str, name: str | None = None, counter=None) -> str:
    """The group name of one call of collective ``kind`` (see the module docstring).

    Args:
      kind: ``"allreduce"``, ``"allgather"``, ``"broadcast"``, ``"alltoall"``,
        ``"reducescatter"``.
      name: the caller's name for the call, or None.
      counter: for the numpy API, the communicator's ``itertools.count``;
        None for TensorFlow ops (the graph's unique name, or ``eager.<kind>``).
    """
    if name:
        return name
    if counter is not None:
        with _lock:
            return f"numpy.{kind}.{next(counter)}"
    import tensorflow as tf  # only the TF ops come here

    if tf.executing_eagerly():
        return f"eager.{kind}"
    graph = tf.compat.v1.get_default_graph()
    # A function's graph has its function's name; a plain tf.Graph (tf.compat.v1) has none.
    return f"{getattr(graph, 'name', 'graph')}/{graph.unique_name(kind, mark_as_used=True)}"


def tensor_names(kind: str, group: str, count: int) -> list[str]:
    """The names of the ``count`` tensors of a call named ``group``."""
    if kind in _SINGLE_TENSOR_KINDS:
        return [group]
    return [f"{group}/{i}" for i in range(count)]


def collective_names(kind: str, count: int, name: str | None = None, counter=None) -> list[str]:
    """The names of the ``count`` tensors of one call: the one function every caller uses."""
    return tensor_names(kind, group_name(kind, name, counter), count)
