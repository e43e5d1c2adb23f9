"""A `ps` task: serves its shard of every table until the workers are done."""

from __future__ import annotations

import sys

from tfx_dist import settings
from tfx_dist.cluster import ClusterInfo
from tfx_dist.comm.service import ServiceServer
from tfx_dist.fault_tolerance import notice
from tfx_dist.parameter_server import _native


def serve(info: ClusterInfo, synchronous: bool, timeout_s: float | None = None,
          dense_variables: str = "workers") -> int:
    """Serves as parameter server ``info.task_index``; returns the process's exit status.

    0 once every worker has said goodbye; 1, with the reason on stderr (the
    worker that vanished or went silent, named), otherwise.
    """
    timeout_s = float(settings.get("TFX_TIMEOUT_S", timeout_s))
    if settings.get("TFX_ELASTIC_DRIVER"):  # tfx-dist-run --elastic: one session per generation
        from tfx_dist.parameter_server import elastic

        return elastic.serve_sessions(info, synchronous, timeout_s, dense_variables)
    servers = list(info.ps_addresses)
    labels = [f"worker {w} ({address})" for w, address in enumerate(info.worker_addresses)]
    server = ServiceServer(info.task_index, servers, info.num_workers, timeout_s=timeout_s,
                           client_labels=labels)
    # A preemption notice: serve the workers' last save, then exit (bounded).
    notice.serve_through_notice(f"parameter server {info.task_index}")
    try:
        _native.call(_native.lib().tfx_ps_serve, server.handle, info.task_index, len(servers),
                     info.num_workers, int(synchronous), timeout_s)
    except _native.ParameterServerError as e:
        print(f"tfx_dist parameter server {info.task_index} ({servers[info.task_index]}): {e}",
              file=sys.stderr, flush=True)
        return 1
    finally:
        server.close()
    return 0
