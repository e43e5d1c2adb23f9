"""Horovod's ``broadcast_object`` and ``allgather_object``: any picklable object, as bytes, eagerly."""

from __future__ import annotations

import io
import pickle

import numpy as np

from tfx_dist.horovod import basics
from tfx_dist.horovod.mpi_ops import _check_process_set, _sub


def _dumps(obj) -> np.ndarray:
    try:
        import cloudpickle as pickler  # Horovod's choice: lambdas and local classes too
    except ImportError:
        pickler = pickle
    buffer = io.BytesIO()
    pickler.dump(obj, buffer)
    return np.frombuffer(buffer.getvalue(), np.uint8)


def broadcast_object(obj, root_rank=0, session=None, name=None, process_set=None):
    """Returns rank ``root_rank``'s ``obj`` on every rank (pickled, sent as bytes; eager)."""
    _check_process_set(process_set)
    comm = basics.communicator()
    data = _dumps(obj) if basics.rank() == root_rank else np.zeros(0, np.uint8)
    (length,) = comm.broadcast_numpy([np.array([data.size], np.int64)], root=root_rank,
                                     name=_sub(name, "size"))
    if basics.rank() != root_rank:
        data = np.zeros(int(length[0]), np.uint8)
    (data,) = comm.broadcast_numpy([data], root=root_rank, name=_sub(name, "data"))
    return pickle.loads(data.tobytes())


def allgather_object(obj, session=None, name=None, process_set=None):
    """Returns the list of every rank's ``obj``, by rank (pickled, gathered as bytes; eager)."""
    _check_process_set(process_set)
    comm = basics.communicator()
    data = _dumps(obj)
    sizes = comm.allgather_numpy(np.array([data.size], np.int64), name=_sub(name, "sizes"))
    gathered = comm.allgather_numpy(data, name=_sub(name, "data"))
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    return [pickle.loads(gathered[a:b].tobytes()) for a, b in zip(offsets[:-1], offsets[1:])]
