"""`TfxConfig`: Ray Train's TensorFlow backend, completed with what tfx_dist's processes need.

Ray's own ``TensorflowConfig`` writes ``TF_CONFIG`` (every worker's
``ip:port``) and nothing else. tfx_dist also needs the job secret, the same in
every process of one start of the group and different in the next: a worker
left over from an earlier start, or of another job, then fails authentication
instead of joining. Ray has no secret store; what it records is the job's and
actors' runtime environments (the dashboard shows them) and the logs. So the
secret is drawn here, in the Train controller, at each start of the worker
group, and handed to each worker actor as the argument of one task, which
sets it in that process's environment: Ray records neither task arguments
nor a process's own changes to its environment.
"""

from __future__ import annotations

import dataclasses
import os
import secrets

import ray
from ray.train.backend import Backend
from ray.train.tensorflow import TensorflowConfig

from tfx_dist.cluster.info import join_address, make_tf_config
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.ray import preflight
from tfx_dist.ray.parameter_servers import ParameterServers


@dataclasses.dataclass
class TfxConfig(TensorflowConfig):
    """Ray Train's ``TensorflowConfig`` for tfx_dist's strategies.

    Args:
      num_ps: parameter servers to start as Ray actors (``ParameterServerStrategy``,
        ``HybridStrategy``); 0 for the all-reduce strategies and ``tfx_dist.horovod``.
      ps_mode: the strategies' ``mode`` (``"sync"`` or ``"async"``): the servers apply
        pushes as the workers' strategy expects.
      cpus_per_ps: CPUs Ray reserves for each parameter server actor.
    """

    num_ps: int = 0
    ps_mode: str = "sync"
    cpus_per_ps: float = 1.0

    @property
    def backend_cls(self):
        return _TfxBackend

    def to_dict(self):
        return {"num_ps": self.num_ps, "ps_mode": self.ps_mode, "cpus_per_ps": self.cpus_per_ps}


class _TfxBackend(Backend):
    def __init__(self):
        self._starts = 0
        self._servers = None

    def on_start(self, worker_group, backend_config: TfxConfig):
        restart_count, self._starts = self._starts, self._starts + 1
        workers = worker_group.execute(_describe_worker)
        preflight.check_same_tensorflow(workers)
        cluster = {"worker": [join_address(w["node_ip"], w["port"]) for w in workers]}
        if backend_config.num_ps:
            preflight.check_free_cpus_for_servers(backend_config.num_ps, backend_config.cpus_per_ps)
            self._servers = ParameterServers(backend_config.num_ps, backend_config.cpus_per_ps)
            cluster["ps"] = self._servers.addresses
        secret = secrets.token_hex(32)  # fresh for every start of the group
        ray.get([worker_group.execute_single_async(rank, _join_job, make_tf_config(cluster, "worker", rank),
                                                   secret, restart_count)
                 for rank in range(len(workers))])
        if self._servers is not None:
            self._servers.serve(cluster, secret, synchronous=backend_config.ps_mode == "sync")

    def on_shutdown(self, worker_group, backend_config: TfxConfig):
        if self._servers is not None:
            self._servers.stop()
            self._servers = None


def _describe_worker() -> dict:
    """Runs on a worker actor: its node, a free port there, and its package versions."""
    from importlib import metadata

    import tfx_dist

    def version(*names):
        for name in names:
            try:
                return metadata.version(name)
            except metadata.PackageNotFoundError:
                continue
        return "not installed"

    ip = ray.util.get_node_ip_address()
    return {"node_ip": ip, "node_id": ray.get_runtime_context().get_node_id(),
            "port": pick_ports(ip, 1)[0],
            "tensorflow": version("tensorflow", "tensorflow-cpu"), "keras": version("keras"),
            "tfx_dist": tfx_dist.__version__}


def _join_job(tf_config: str, secret: str, restart_count: int) -> None:
    """Runs on a worker actor before the training function: its place in the job and the secret.

    A task of the actor runs in its main thread, where signal handlers can be installed: SIGTERM
    becomes a preemption notice for `StepCheckpoint` (the training function runs in another thread).
    """
    from tfx_dist.ray import preemption

    os.environ["TF_CONFIG"] = tf_config
    os.environ["TFX_JOB_SECRET"] = secret
    os.environ["TFX_RESTART_COUNT"] = str(restart_count)
    preemption.install_in_actor()
