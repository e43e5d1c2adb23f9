"""Horovod's environment settings: which map onto tfx_dist's, which are ignored.

Each Horovod variable users set is listed here once. A mapped one is used when
the matching ``TFX_*`` variable is unset (the tfx_dist name wins). An ignored
one, when set, is reported once per process (by rank 0) as a warning.
The variables horovodrun sets for its own processes (``HOROVOD_RANK``,
``HOROVOD_CONTROLLER``, ``HOROVOD_GLOO_*``, ...) are read by
`tfx_dist.cluster` (with `tfx_dist.cluster.horovod_bootstrap`), not here.
"""

from __future__ import annotations

import os
import warnings

# Horovod variable -> (tfx_dist setting, Communicator argument, parse from Horovod's unit).
MAPPED = {
    "HOROVOD_FUSION_THRESHOLD": ("TFX_COMM_FUSION_BYTES", "fusion_bucket_bytes", int),
    "HOROVOD_CYCLE_TIME": ("TFX_CYCLE_TIME_MS", "cycle_time_ms", float),
    "HOROVOD_GLOO_TIMEOUT_SECONDS": ("TFX_TIMEOUT_S", "timeout_s", float),
    "HOROVOD_TIMELINE": ("TFX_TIMELINE", "timeline", str),
    "HOROVOD_TIMELINE_MARK_CYCLES": ("TFX_TIMELINE_MARK_CYCLES", "timeline_mark_cycles",
                                     lambda text: text.lower() in ("1", "true", "yes", "on")),
}

# Horovod variable -> why it has no effect here.
IGNORED = {
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "a stalled collective fails after TFX_TIMEOUT_S instead",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "a stalled collective fails after TFX_TIMEOUT_S instead",
    "HOROVOD_STALL_CHECK_DISABLE": "a stalled collective fails after TFX_TIMEOUT_S instead",
    "HOROVOD_AUTOTUNE": "no autotuning; set TFX_COMM_FUSION_BYTES and TFX_CYCLE_TIME_MS",
    "HOROVOD_AUTOTUNE_LOG": "no autotuning",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "same-host ranks use shared memory (TFX_SHM) instead",
    "HOROVOD_HIERARCHICAL_ALLGATHER": "same-host ranks use shared memory (TFX_SHM) instead",
    "HOROVOD_CACHE_CAPACITY": "the runtime negotiates every collective by name, no response cache",
    "HOROVOD_LOG_LEVEL": "tfx_dist logs through TensorFlow's logger",
    "HOROVOD_ENABLE_ASYNC_COMPLETION": "the tfx_dist kernels are always asynchronous",
    "HOROVOD_DISABLE_GROUP_FUSION": "grouped all-reduces are always fused",
    "HOROVOD_THREAD_AFFINITY": "not supported",
    "HOROVOD_NUM_NCCL_STREAMS": "no NCCL here",
    "HOROVOD_BATCH_D2D_MEMCOPIES": "no GPU buffers here",
    "HOROVOD_ELASTIC": "elastic Horovod is not supported",
}

_reported = False


def communicator_options(environ=None) -> dict:
    """The `tfx_dist.comm.Communicator` arguments Horovod's variables set."""
    environ = os.environ if environ is None else environ
    options = {}
    for variable, (tfx_name, argument, parse) in MAPPED.items():
        text = environ.get(variable, "").strip()
        if text and not environ.get(tfx_name):
            try:
                options[argument] = parse(text)
            except ValueError as e:
                raise ValueError(f"{variable}={text!r}: expected a number ({e})") from None
    return options


def ignored(environ=None) -> dict:
    """The ignored Horovod variables that are set: name -> why ignored."""
    environ = os.environ if environ is None else environ
    return {name: why for name, why in IGNORED.items() if environ.get(name)}


def report_ignored(rank: int) -> None:
    global _reported
    if _reported or rank != 0:
        return
    _reported = True
    for name, why in ignored().items():
        warnings.warn(f"tfx_dist.horovod ignores {name}={os.environ[name]!r}: {why}.", stacklevel=3)
