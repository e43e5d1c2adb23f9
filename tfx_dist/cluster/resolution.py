"""resolve(): the one place that decides where this process sits in the job."""

from __future__ import annotations

import json
import os
from typing import Mapping, Optional

from tfx_dist.cluster.info import ClusterInfo, Source, single_process
from tfx_dist.cluster.launcher_env import from_horovod_env, from_mpi_env, from_slurm_env
from tfx_dist.cluster.tf_config import parse_tf_config
from tfx_dist.cluster.tf_resolver import from_cluster_resolver


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
        return from_cluster_resolver(cluster_resolver)
    own_environment = environ is None
    environ = os.environ if environ is None else environ
    text = environ.get("TF_CONFIG", "").strip()
    if text and not _is_empty_json_object(text):
        return parse_tf_config(text)
    for reader in (from_horovod_env, from_mpi_env, from_slurm_env):
        info = reader(environ)
        if info is not None:
            return _with_addresses(info, environ) if own_environment else info
    return single_process()


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
