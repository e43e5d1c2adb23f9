"""What each task gets on top of the launcher's environment: TF_CONFIG, the job's secret, the restart
count, the checkpoint directory, defaults."""

from __future__ import annotations

import os
import secrets
from typing import List, Optional, Sequence

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.launcher.status import LaunchError

RESTART_COUNT = "TFX_RESTART_COUNT"      # 0 in the first run of a job, then 1, 2, ...
CHECKPOINT_DIR = "TFX_CHECKPOINT_DIR"    # where the workers save and LATEST.json is
# What engines that restart a job themselves set, in the order they are read.
ENGINE_RESTART_COUNTS = (RESTART_COUNT, "SLURM_RESTART_COUNT")


def task_labels(num_workers: int, num_ps: int = 0) -> List[str]:
    """How output lines name each task: the worker's rank, then ``ps0``, ``ps1``..."""
    return [str(rank) for rank in range(num_workers)] + [f"ps{i}" for i in range(num_ps)]


def engine_restart_count(environ: Optional[dict] = None) -> int:
    """How often an engine above the launcher restarted this job (0 if none said so).

    Slurm sets ``SLURM_RESTART_COUNT`` in a requeued job; a Kubernetes pod or
    a script that reruns the launcher can set ``TFX_RESTART_COUNT`` (see
    docs/clusters.md). The launcher adds its own restarts to it.
    """
    environ = os.environ if environ is None else environ
    for name in ENGINE_RESTART_COUNTS:
        text = environ.get(name, "").strip()
        if text:
            if not text.isdigit():
                raise LaunchError(f"{name}={text!r} is not a restart count (0, 1, 2, ...)")
            return int(text)
    return 0


def worker_environments(num_workers: int, host: str, ports: Sequence[int],
                        base: Optional[dict] = None, num_ps: int = 0, restart_count: int = 0,
                        checkpoint_dir: Optional[str] = None) -> List[dict]:
    """Returns each task's environment: ``base`` (default ``os.environ``) plus TF_CONFIG, the secret,
    ``TFX_RESTART_COUNT`` and, when given, ``TFX_CHECKPOINT_DIR``.

    The workers come first (ranks 0..N-1, on ``ports[:N]``), then the ``num_ps``
    parameter servers (on the next ports).
    """
    base = dict(os.environ if base is None else base)
    addresses = [join_address(host, port) for port in ports]
    cluster = {"worker": addresses[:num_workers]}
    if num_ps:
        cluster["ps"] = addresses[num_workers:num_workers + num_ps]
    tasks = [("worker", rank) for rank in range(num_workers)] + [("ps", i) for i in range(num_ps)]
    secret = secrets.token_hex(32)
    envs = []
    for task_type, index in tasks:
        env = dict(base)
        env["TF_CONFIG"] = make_tf_config(cluster, task_type, index)
        env["TFX_JOB_SECRET"] = secret
        env[RESTART_COUNT] = str(restart_count)
        if checkpoint_dir:
            env[CHECKPOINT_DIR] = checkpoint_dir
        env.setdefault("PYTHONUNBUFFERED", "1")
        # TensorFlow's default CPU allocator hands large buffers back to the
        # OS, so every step page-faults its gradient buffers in again, which
        # costs more than reducing them (see BENCHMARKS.md); its caching
        # allocator keeps them.
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        envs.append(env)
    return envs
