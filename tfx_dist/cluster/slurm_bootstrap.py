"""Addresses for jobs started by ``srun`` without ``TF_CONFIG``: TensorFlow's SlurmClusterResolver.

srun tells each task its rank, the step's nodes and tasks per node.
:func:`complete_slurm` hands those to TensorFlow's ``SlurmClusterResolver``,
which names every task ``node:port`` (ports counted up from a base on each
node, tasks in block order). The base is the first of
``SLURM_STEP_RESV_PORTS`` when Slurm reserved ports for the step
(``MpiParams=ports=...`` in slurm.conf), else derived from the job and step
ids (the same in every task, different for most concurrent jobs):
15000 + 16 * ((31 * job id + step id) mod 1000). Pass your own
``SlurmClusterResolver(port_base=...)`` to the strategy to choose otherwise.
The job secret must come from the environment (``TFX_JOB_SECRET``, exported
by the batch script): srun has no channel to send it.
"""

from __future__ import annotations

import dataclasses

from tfx_dist.cluster.info import ClusterConfigError, ClusterInfo, Source
from tfx_dist.cluster.launcher_env import expand_tasks_per_node
from tfx_dist.cluster.tf_resolver import from_cluster_resolver


def slurm_port_base(environ) -> int:
    """The first port of each node's tasks in a SLURM step (see the module docstring)."""
    reserved = environ.get("SLURM_STEP_RESV_PORTS", "")
    if reserved:
        first = reserved.split(",")[0].split("-")[0]
        if first.isdigit():
            return int(first)
    job = int(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID") or 0)
    step = int(environ.get("SLURM_STEP_ID") or environ.get("SLURM_STEPID") or 0)
    return 15000 + 16 * ((31 * job + step) % 1000)


def complete_slurm(info: ClusterInfo, environ) -> ClusterInfo:
    """``info`` (from srun's variables) with every task's address, from TensorFlow's SlurmClusterResolver."""
    import tensorflow as tf  # only here: heavy

    SlurmClusterResolver = tf.distribute.cluster_resolver.SlurmClusterResolver

    # The resolver lists at most gpus_per_node / gpus_per_task tasks per node
    # (it zips the tasks with GPU slots), even with auto_set_gpu=False: give
    # every task one nominal slot. GPUs are left to Slurm (--gpus-per-task sets
    # CUDA_VISIBLE_DEVICES) and the strategy uses every GPU it sees.
    per_node = max(expand_tasks_per_node(environ.get("SLURM_STEP_TASKS_PER_NODE") or "1"))
    resolver = SlurmClusterResolver(port_base=slurm_port_base(environ), gpus_per_node=per_node,
                                    gpus_per_task=1, auto_set_gpu=False, rpc_layer=None)
    resolved = from_cluster_resolver(resolver)
    if (resolved.rank, resolved.num_workers) != (info.rank, info.num_workers):
        raise ClusterConfigError(
            f"SLURM: SlurmClusterResolver places this task at rank {resolved.rank} of "
            f"{resolved.num_workers}, SLURM_PROCID says {info.rank} of {info.num_workers} "
            f"(tfx_dist needs tasks in block order: srun --distribution=block)")
    return dataclasses.replace(resolved, source=Source.SLURM)
