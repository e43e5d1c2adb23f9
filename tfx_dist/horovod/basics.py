"""Horovod's process queries (`init`, `size`, `rank`, ...) over one tfx_dist communicator.

`init` resolves the job with `tfx_dist.cluster.resolve` (TF_CONFIG, so
``tfx-dist-run``; horovodrun's ``HOROVOD_*`` variables; mpirun's, with the
addresses exchanged over MPI) and connects this process's one
`tfx_dist.comm.Communicator`. Every collective of `tfx_dist.horovod` runs on it.
"""

from __future__ import annotations

import threading

from tfx_dist.horovod import _env

NOT_INITIALIZED = "Horovod has not been initialized; use hvd.init()."

_lock = threading.Lock()
_state = None  # the _State of this process once init() ran


class _State:
    def __init__(self, info, communicator, cross_rank, cross_size):
        self.info = info
        self.communicator = communicator
        self.cross_rank, self.cross_size = cross_rank, cross_size


def _host_index(info):
    """(cross_rank, cross_size): the index of this rank's host among the job's hosts, and their number."""
    import os

    if "HOROVOD_CROSS_RANK" in os.environ and "HOROVOD_CROSS_SIZE" in os.environ:
        return int(os.environ["HOROVOD_CROSS_RANK"]), int(os.environ["HOROVOD_CROSS_SIZE"])
    if info.worker_addresses:
        hosts = [a.rsplit(":", 1)[0] for a in info.worker_addresses]
        order = list(dict.fromkeys(hosts))
        return order.index(hosts[info.rank]), len(order)
    return 0, 1


def init(comm=None, process_sets=None):
    """Connects this process to the others of the job (Horovod's ``hvd.init()``).

    Calling it again while initialized does nothing, as in Horovod.

    Args:
      comm: must be None: tfx_dist has no MPI communicators or rank subsets.
      process_sets: must be None (Horovod's process sets are not supported).

    Raises:
      NotImplementedError: ``comm`` or ``process_sets`` given.
      ValueError: the job gives ranks but no addresses (see `docs/horovod.md`).
    """
    global _state
    if comm is not None or process_sets is not None:
        raise NotImplementedError(
            "tfx_dist.horovod.init() takes no `comm` or `process_sets`: every process of the "
            f"job is in the one communicator. Received: comm={comm!r}, process_sets={process_sets!r}")
    with _lock:
        if _state is not None:
            return
        from tfx_dist import cluster
        from tfx_dist.elastic import membership
        from tfx_dist.elastic.generation import member_info
        from tfx_dist.input import iterator_reaper

        info = cluster.resolve()
        if not info.in_allreduce_group:
            raise ValueError(f"hvd.init(): this process is a {info.task_type!r} task, which does "
                             "not train; run Horovod code on the chief and the workers only.")
        size = info.num_workers
        if size > 1 and not info.worker_addresses:
            raise ValueError(
                f"hvd.init(): the job gives this process rank {info.rank} of {size} "
                f"({info.source.value}) but not the address of every rank. Start it with "
                "`tfx-dist-run -n N`, `horovodrun --gloo`, or mpirun with mpi4py installed, "
                "or set TF_CONFIG.")
        addresses = list(info.worker_addresses or ["127.0.0.1:0"])
        communicator = membership.connect(info.rank, size, addresses, **_env.communicator_options())
        if membership.elastic():  # the driver says the rank and size; each reset says them again
            info = member_info(info, membership.generation(), communicator.addresses)
        membership.on_reset(_follow_reset)  # also without a driver: a reset makes a new communicator
        _state = _State(info, communicator, *_host_index(info))
        _env.report_ignored(info.rank)
        # Keras (and a custom loop) drops its input iterator every epoch; destroying
        # one can stall this rank, and so every rank, for up to a second (docs/horovod.md).
        iterator_reaper.reap_dataset_iterators_in_background()


def _follow_reset(generation, communicator):
    """An elastic reset (`tfx_dist.elastic.membership`): rank, size and every collective follow
    the new generation's communicator."""
    from tfx_dist.elastic.generation import member_info

    global _state
    with _lock:
        if _state is not None:
            info = member_info(_state.info, generation, communicator.addresses)
            _state = _State(info, communicator, *_host_index(info))


def shutdown():
    """Closes the communicator; `init` may be called again afterwards."""
    global _state
    with _lock:
        state, _state = _state, None
    if state is not None:
        state.communicator.close()


def is_initialized() -> bool:
    return _state is not None


def state() -> _State:
    if _state is None:
        raise ValueError(NOT_INITIALIZED)
    return _state


def communicator():
    """The `tfx_dist.comm.Communicator` under every collective (raises if not initialized)."""
    return state().communicator


def size() -> int:
    return state().info.num_workers


def rank() -> int:
    return state().info.rank


def local_size() -> int:
    info = state().info
    return info.local_size if info.local_size is not None else 1


def local_rank() -> int:
    info = state().info
    return info.local_rank if info.local_rank is not None else 0


def cross_size() -> int:
    return state().cross_size


def cross_rank() -> int:
    return state().cross_rank


def is_homogeneous() -> bool:
    """True when every host runs the same number of processes (assumed from this host's count)."""
    return size() == local_size() * cross_size()


# Which of Horovod's builds this resembles: none of its controllers or
# libraries is here; the tfx_dist runtime plays Gloo's part (TCP and shared
# memory, no MPI library), so scripts that branch on these take the Gloo path.
def mpi_threads_supported() -> bool:
    state()
    return False


def mpi_enabled() -> bool:
    return False


def mpi_built() -> bool:
    return False


def gloo_enabled() -> bool:
    return True


def gloo_built() -> bool:
    return True


def nccl_built() -> int:
    return 0


def ddl_built() -> bool:
    return False


def ccl_built() -> bool:
    return False


def cuda_built() -> bool:
    return False


def rocm_built() -> bool:
    return False


def start_timeline(file_path, mark_cycles=False):
    """Starts recording the timeline (a Chrome trace of every collective).

    Unlike Horovod, where rank 0 writes one file, every rank writes its own:
    rank 0 ``file_path``, rank r ``<stem>.rank<r><ext>`` (or ``%r`` in the
    path replaced by the rank). A running timeline is stopped first.

    Returns:
      The file this rank writes.
    """
    return communicator().start_timeline(str(file_path), mark_cycles=mark_cycles)


def stop_timeline():
    """Stops the timeline and closes its file (valid JSON from then on)."""
    communicator().stop_timeline()
