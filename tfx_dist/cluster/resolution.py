"""resolve(): the one place that decides where this process sits in the job."""

from __future__ import annotations

import json
import os
from typing import Mapping, Optional

from tfx_dist.cluster.info import ClusterConfigError, ClusterInfo, Source, from_cluster, single_process
from tfx_dist.cluster.launcher_env import from_horovod_env, from_mpi_env, from_slurm_env
from tfx_dist.cluster.tf_config import parse_tf_config


def from_cluster_resolver(cluster_resolver) -> ClusterInfo:
    """Reads any ``tf.distribute.cluster_resolver.ClusterResolver``.

    For example TensorFlow's ``TFConfigClusterResolver``, ``SlurmClusterResolver``
    or ``SimpleClusterResolver``: its ``cluster_spec()``, ``task_type``,
    ``task_id`` and ``rpc_layer`` are checked with the same rules as TF_CONFIG.

    Raises:
      TypeError: ``cluster_resolver`` has no ``cluster_spec()``.
      ClusterConfigError: the resolver's cluster or task is invalid, or it
        names no task (``task_type`` None).
    """
    if not callable(getattr(cluster_resolver, "cluster_spec", None)):
        raise TypeError("Expected `cluster_resolver` to be a tf.distribute.cluster_resolver."
                        f"ClusterResolver. Received: cluster_resolver={cluster_resolver!r} "
                        f"(of type {type(cluster_resolver).__name__})")
    name = type(cluster_resolver).__name__
    spec = cluster_resolver.cluster_spec()  # SlurmClusterResolver sets task_type/task_id here
    cluster = spec.as_dict() if hasattr(spec, "as_dict") else spec
    cluster = {job: _dense(job, tasks, name) for job, tasks in dict(cluster).items()}
    task_type, task_id = cluster_resolver.task_type, cluster_resolver.task_id
    if task_type is None or task_id is None:
        raise ClusterConfigError(
            f"{name}: task_type={task_type!r}, task_id={task_id!r}: the resolver does not say "
            "which task this process is; construct it with task_type= and task_id=")
    return from_cluster(cluster, task_type, task_id, source=Source.CLUSTER_RESOLVER,
                        where=f"{name}.cluster_spec()",
                        rpc_layer=getattr(cluster_resolver, "rpc_layer", None) or None)


def _dense(job: str, tasks, name: str):
    """ClusterSpec.as_dict() gives {index: address} for sparse jobs; accept it when dense."""
    if isinstance(tasks, Mapping):
        if sorted(tasks) != list(range(len(tasks))):
            raise ClusterConfigError(f"{name}.cluster_spec(): job {job!r} has task indices "
                                     f"{sorted(tasks)}; tfx_dist needs indices 0..n-1")
        return [tasks[i] for i in range(len(tasks))]
    return tasks


def resolve(cluster_resolver=None, environ: Optional[Mapping[str, str]] = None) -> ClusterInfo:
    """Returns where this process sits in the job.

    Sources, first match wins:

    1. ``cluster_resolver`` if given (any ``tf.distribute.cluster_resolver.ClusterResolver``).
    2. ``TF_CONFIG`` (Kubernetes TFJob, tfx-dist-run). ``TF_CONFIG`` unset, empty
       or ``{}`` counts as unset, as in TensorFlow.
    3. horovodrun's ``HOROVOD_RANK``/``HOROVOD_SIZE``/``HOROVOD_LOCAL_RANK``/``HOROVOD_LOCAL_SIZE``.
    4. mpirun's ``OMPI_COMM_WORLD_RANK``/``..._SIZE``/``..._LOCAL_RANK``/``..._LOCAL_SIZE``
       (or MPICH's ``PMI_RANK``/``PMI_SIZE``).
    5. a SLURM job step's ``SLURM_PROCID``/``SLURM_STEP_NUM_TASKS``/``SLURM_LOCALID``.
    6. otherwise a cluster of one: rank 0 of 1.

    Sources 3 to 5 give ranks but no addresses. When this process's own
    environment is read (``environ`` not given) and the job has several
    processes, they are completed: under mpirun by an exchange over MPI when
    mpi4py is installed (`tfx_dist.cluster.mpi_bootstrap`), under
    ``horovodrun --gloo`` through its rendezvous store
    (`tfx_dist.cluster.horovod_bootstrap`), under srun by
    TensorFlow's ``SlurmClusterResolver`` (`tfx_dist.cluster.slurm_bootstrap`).
    Otherwise the result has ``worker_addresses=None`` (and
    ``cluster``/``address`` None).

    Example:
      >>> env = {"TF_CONFIG": '{"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}, '
      ...                     '"task": {"type": "worker", "index": 0}}'}
      >>> info = resolve(environ=env)
      >>> info.rank, info.num_workers, info.worker_addresses
      (1, 3, ('a:1', 'b:1', 'c:1'))

    Args:
      cluster_resolver: optional ``tf.distribute.cluster_resolver.ClusterResolver``.
      environ: the environment to read; defaults to ``os.environ``.

    Raises:
      ClusterConfigError (a ValueError): the chosen source is malformed; the
        message names the field, what arrived and the expected shape.
    """
    if cluster_resolver is not None:
        return _armed(from_cluster_resolver(cluster_resolver))
    own_environment = environ is None
    environ = os.environ if environ is None else environ
    text = environ.get("TF_CONFIG", "").strip()
    if text and not _is_empty_json_object(text):
        return _armed(parse_tf_config(text)) if own_environment else parse_tf_config(text)
    for reader in (from_horovod_env, from_mpi_env, from_slurm_env):
        info = reader(environ)
        if info is not None:
            return _armed(_with_addresses(info, environ)) if own_environment else info
    return single_process()


def _armed(info: ClusterInfo) -> ClusterInfo:
    """This process's own place in a multi-worker job: from now until its
    rendezvous finishes, an exception that ends the script tells rank 0
    (``tfx_dist.comm.early_failure``). Not for parameter-server jobs, whose
    workers meet the servers, not rank 0's rendezvous."""
    if info.in_allreduce_group and info.is_distributed and info.worker_addresses and not info.ps_addresses:
        from tfx_dist.comm import early_failure  # late: tfx_dist.comm imports this package

        early_failure.arm(info.rank, info.num_workers, info.worker_addresses,
                          os.environ.get("TFX_JOB_SECRET"))
    return info


def _with_addresses(info: ClusterInfo, environ: Mapping[str, str]) -> ClusterInfo:
    """Completes a launcher's ranks with every rank's address, where this package knows how."""
    if not info.is_distributed or info.worker_addresses:
        return info
    if info.source is Source.MPI:
        from tfx_dist.cluster import mpi_bootstrap
        return mpi_bootstrap.complete_mpi(info, environ)
    if info.source is Source.SLURM:
        from tfx_dist.cluster import slurm_bootstrap
        return slurm_bootstrap.complete_slurm(info, environ)
    if info.source is Source.HOROVOD:
        from tfx_dist.cluster import horovod_bootstrap
        return horovod_bootstrap.complete_horovod(info, environ)
    return info


def _is_empty_json_object(text: str) -> bool:
    try:
        return json.loads(text) == {}
    except ValueError:
        return False
