"""Where this process sits in a distributed job: TF_CONFIG, cluster resolvers, launchers.

Example:
  >>> import tfx_dist.cluster as cluster
  >>> info = cluster.resolve(environ={})   # nothing configured: a cluster of one
  >>> info.rank, info.num_workers, info.is_chief
  (0, 1, True)

This package imports no TensorFlow; it reads TensorFlow's cluster resolvers by
their public methods.
"""

from tfx_dist.cluster.info import (ALLREDUCE_TASK_TYPES, EXPECTED_TF_CONFIG, TASK_TYPES,
                                   ClusterConfigError, ClusterInfo, Source, join_address,
                                   make_tf_config, split_address)
from tfx_dist.cluster.launcher_env import (expand_hostlist, from_horovod_env, from_mpi_env,
                                           from_slurm_env)
from tfx_dist.cluster.resolution import resolve
from tfx_dist.cluster.tf_resolver import from_cluster_resolver
from tfx_dist.cluster.tf_config import parse_tf_config

__all__ = [
    "ALLREDUCE_TASK_TYPES", "EXPECTED_TF_CONFIG", "TASK_TYPES", "ClusterConfigError",
    "ClusterInfo", "Source", "expand_hostlist", "from_cluster_resolver", "from_horovod_env",
    "from_mpi_env", "from_slurm_env", "join_address", "make_tf_config", "parse_tf_config",
    "resolve", "split_address",
]
