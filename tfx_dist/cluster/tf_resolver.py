"""from_cluster_resolver(): reads a TensorFlow ``ClusterResolver`` by its public methods.

Its own module because both :func:`tfx_dist.cluster.resolve` and the srun
bootstrap (which builds TensorFlow's ``SlurmClusterResolver``) read resolvers.
"""

from __future__ import annotations

from typing import Mapping

from tfx_dist.cluster.info import ClusterConfigError, ClusterInfo, Source, from_cluster


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
