"""What each task gets on top of the launcher's environment: TF_CONFIG, the job's secret, defaults."""

from __future__ import annotations

import os
import secrets
from typing import List, Optional, Sequence

from tfx_dist.cluster import join_address, make_tf_config


def task_labels(num_workers: int, num_ps: int = 0) -> List[str]:
    """How output lines name each task: the worker's rank, then ``ps0``, ``ps1``..."""
    return [str(rank) for rank in range(num_workers)] + [f"ps{i}" for i in range(num_ps)]


def worker_environments(num_workers: int, host: str, ports: Sequence[int],
                        base: Optional[dict] = None, num_ps: int = 0) -> List[dict]:
    """Returns each task's environment: ``base`` (default ``os.environ``) plus TF_CONFIG and the secret.

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
        env.setdefault("PYTHONUNBUFFERED", "1")
        # TensorFlow's default CPU allocator hands large buffers back to the
        # OS, so every step page-faults its gradient buffers in again, which
        # costs more than reducing them (see BENCHMARKS.md); its caching
        # allocator keeps them.
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        envs.append(env)
    return envs
