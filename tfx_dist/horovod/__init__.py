"""Horovod's TensorFlow API (``horovod.tensorflow``) on tfx_dist's collectives.

Scripts written for Horovod change only their import::

    import tfx_dist.horovod as hvd          # was: import horovod.tensorflow as hvd

    hvd.init()
    total = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum)   # [size]

and run under ``tfx-dist-run -n N``, ``horovodrun --gloo -np N`` or
``mpirun -np N`` (with mpi4py). What differs from Horovod is listed in
``docs/horovod.md``.
"""

from tfx_dist.horovod.basics import (ccl_built, cross_rank, cross_size, cuda_built, ddl_built,
                                     gloo_built, gloo_enabled, init, is_homogeneous,
                                     is_initialized, local_rank, local_size, mpi_built,
                                     mpi_enabled, mpi_threads_supported, nccl_built, rank,
                                     rocm_built, shutdown, size, start_timeline, stop_timeline)
from tfx_dist.horovod.compression import Compression
from tfx_dist.horovod.gradients import (DistributedGradientTape, DistributedOptimizer,
                                        PartialDistributedGradientTape, PartialDistributedOptimizer)
from tfx_dist.horovod.mpi_ops import _executing_eagerly  # noqa: F401 (Horovod's, used by its tests)
from tfx_dist.horovod.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather, allreduce,
                                      alltoall, broadcast, broadcast_, broadcast_variables,
                                      grouped_allgather, grouped_allreduce, grouped_reducescatter, join,
                                      local_rank_op, local_size_op, rank_op, reducescatter, size_op)
from tfx_dist.horovod.objects import allgather_object, broadcast_object
from tfx_dist.horovod.unsupported import (ProcessSet, add_process_set, broadcast_global_variables,
                                          global_process_set, remove_process_set)


def __getattr__(name):
    if name == "SyncBatchNormalization":  # imported on use: it loads Keras
        from tfx_dist.horovod.sync_batch_norm import SyncBatchNormalization

        return SyncBatchNormalization
    if name == "elastic":  # imported on use: its Keras state loads Keras
        import importlib

        return importlib.import_module("tfx_dist.horovod.elastic")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Adasum", "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer", "Max",
    "Min", "PartialDistributedGradientTape", "PartialDistributedOptimizer", "ProcessSet", "Product",
    "Sum", "SyncBatchNormalization", "add_process_set", "allgather", "allgather_object", "allreduce",
    "alltoall", "broadcast", "broadcast_", "broadcast_global_variables", "broadcast_object",
    "broadcast_variables", "ccl_built", "elastic", "cross_rank", "cross_size", "cuda_built", "ddl_built",
    "gloo_built", "gloo_enabled", "global_process_set", "grouped_allgather", "grouped_allreduce",
    "grouped_reducescatter", "init", "is_homogeneous", "is_initialized", "join", "local_rank",
    "local_rank_op", "local_size", "local_size_op", "mpi_built", "mpi_enabled",
    "mpi_threads_supported", "nccl_built", "rank", "rank_op", "reducescatter", "remove_process_set",
    "rocm_built", "shutdown", "size", "size_op", "start_timeline", "stop_timeline",
]
