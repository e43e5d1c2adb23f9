"""The parameter servers of a Ray job: one actor each, serving as a ``ps`` task of TF_CONFIG.

Under ``tfx-dist-run --ps N`` a server is the user's program started with a
``ps`` TF_CONFIG, whose strategy serves and exits. Under Ray the servers run no
user code: each actor calls the same `tfx_dist.parameter_server.server.serve`
with the same cluster, from the start of the worker group to its end.
"""

from __future__ import annotations

import os
from typing import List

import ray

from tfx_dist.cluster.info import join_address, make_tf_config
from tfx_dist.launcher.ports import pick_ports


@ray.remote
class _ParameterServerActor:
    def address(self) -> str:
        ip = ray.util.get_node_ip_address()
        return join_address(ip, pick_ports(ip, 1)[0])

    def serve(self, tf_config: str, secret: str, synchronous: bool) -> int:
        os.environ["TF_CONFIG"] = tf_config
        os.environ["TFX_JOB_SECRET"] = secret
        from tfx_dist.cluster import resolve
        from tfx_dist.parameter_server.server import serve

        return serve(resolve(), synchronous=synchronous)


class ParameterServers:
    """``num_ps`` server actors: their addresses, then serving until `stop`."""

    def __init__(self, num_ps: int, cpus_per_ps: float):
        self._actors = [_ParameterServerActor.options(num_cpus=cpus_per_ps, max_restarts=0).remote()
                        for _ in range(num_ps)]
        self.addresses: List[str] = ray.get([a.address.remote() for a in self._actors])
        self._serving = []

    def serve(self, cluster: dict, secret: str, synchronous: bool) -> None:
        self._serving = [actor.serve.remote(make_tf_config(cluster, "ps", index), secret, synchronous)
                         for index, actor in enumerate(self._actors)]

    def stop(self) -> None:
        for actor in self._actors:
            ray.kill(actor, no_restart=True)
        self._actors, self._serving = [], []
