"""What Horovod has and tfx_dist.horovod refuses, each with an error that says what to use instead."""

from __future__ import annotations

from tfx_dist.horovod import basics

_PROCESS_SETS = ("tfx_dist.horovod has one process set, the global one (every rank of the job): "
                 "run each group of ranks as its own job, or use the global set (omit process_set=).")


class ProcessSet:
    """Horovod's process sets are not supported: constructing one raises."""

    process_set_id = 0

    def __init__(self, ranks_or_comm=None):
        raise NotImplementedError(f"{_PROCESS_SETS} Received: ProcessSet({ranks_or_comm!r})")


class _GlobalProcessSet:
    """``hvd.global_process_set``: every rank; the only set, accepted wherever Horovod takes one."""

    process_set_id = 0
    ranks = None

    def size(self) -> int:
        return basics.size()

    def rank(self) -> int:
        return basics.rank()

    def included(self) -> bool:
        return True

    def __repr__(self):
        return "ProcessSet(process_set_id=0, global)"


global_process_set = _GlobalProcessSet()


def add_process_set(process_set):
    raise NotImplementedError(f"{_PROCESS_SETS} Received: add_process_set({process_set!r})")


def remove_process_set(process_set):
    raise NotImplementedError(f"{_PROCESS_SETS} Received: remove_process_set({process_set!r})")


def broadcast_global_variables(root_rank):
    raise NotImplementedError(
        "broadcast_global_variables needs TensorFlow 1's global variables; with Keras 3 use "
        "hvd.callbacks.BroadcastGlobalVariablesCallback(root_rank) in fit(), or "
        "tfx_dist.horovod.broadcast_variables(model.variables, root_rank).")
