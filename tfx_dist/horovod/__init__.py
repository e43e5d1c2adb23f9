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
from tfx_dist.horovod.gradients import DistributedGradientTape, DistributedOptimizer
from tfx_dist.horovod.mpi_ops import (Adasum, Average, Max, Min, Product, Sum, allgather,
                                      allgather_object, allreduce, alltoall, broadcast,
                                      broadcast_object, broadcast_variables, grouped_allreduce,
                                      join, local_rank_op, local_size_op, rank_op, reducescatter,
                                      size_op)

__all__ = [
    "Adasum", "Average", "Compression", "DistributedGradientTape", "DistributedOptimizer", "Max",
    "Min", "Product", "Sum", "allgather", "allgather_object", "allreduce", "alltoall",
    "broadcast", "broadcast_object", "broadcast_variables", "ccl_built", "cross_rank",
    "cross_size", "cuda_built", "ddl_built", "gloo_built", "gloo_enabled", "grouped_allreduce",
    "init", "is_homogeneous", "is_initialized", "join", "local_rank", "local_rank_op",
    "local_size", "local_size_op", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "rank", "rank_op", "reducescatter", "rocm_built", "shutdown", "size", "size_op",
    "start_timeline", "stop_timeline",
]
