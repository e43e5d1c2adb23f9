"""Horovod's Keras API (``horovod.tensorflow.keras``) for Keras 3 on tfx_dist's collectives.

Example::

    import tfx_dist.horovod.keras as hvd    # was: import horovod.tensorflow.keras as hvd

    hvd.init()
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(x, y, callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                               hvd.callbacks.MetricAverageCallback()])
"""

from tfx_dist.horovod import (Adasum, Average, Compression, Max, Min, Product, Sum,
                              allgather_object, broadcast_object, ccl_built, cross_rank,
                              cross_size, cuda_built, ddl_built, gloo_built, gloo_enabled, init,
                              is_homogeneous, is_initialized, local_rank, local_size, mpi_built,
                              mpi_enabled, mpi_threads_supported, nccl_built, rank, rocm_built,
                              shutdown, size, start_timeline, stop_timeline)
from tfx_dist.horovod import mpi_ops as _ops
from tfx_dist.horovod.gradients import DistributedOptimizer, PartialDistributedOptimizer
from tfx_dist.horovod.unsupported import broadcast_global_variables
from tfx_dist.horovod.keras import callbacks
from tfx_dist.horovod import elastic_keras2

elastic_keras2.install()  # Keras 2 names of Horovod's Keras scripts (optimizer.lr, compile's switch)


def allreduce(value, name=None, average=None, prescale_factor=1.0, postscale_factor=1.0,
              op=None, compression=Compression.none):
    """All-reduces a tensor-compatible value over every rank (default op Average); returns a tensor."""
    return _ops.allreduce(value, average=average, compression=compression, op=op,
                          prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                          name=name)


def allgather(value, name=None):
    """Concatenates every rank's value on dimension 0; returns a tensor."""
    return _ops.allgather(value, name=name)


def broadcast(value, root_rank, name=None):
    """Rank ``root_rank``'s value on every rank; returns a tensor."""
    return _ops.broadcast(value, root_rank, name=name)


def reducescatter(value, name=None, op=Average):
    return _ops.reducescatter(value, name=name, op=op)


def __getattr__(name):
    if name == "SyncBatchNormalization":  # imported on use: Keras layers load late
        from tfx_dist.horovod.sync_batch_norm import SyncBatchNormalization

        return SyncBatchNormalization
    if name == "elastic":
        import importlib

        return importlib.import_module("tfx_dist.horovod.keras.elastic")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "Adasum", "Average", "Compression", "DistributedOptimizer", "Max", "Min",
    "PartialDistributedOptimizer", "Product", "Sum", "SyncBatchNormalization",
    "allgather", "allgather_object", "allreduce", "broadcast", "broadcast_global_variables",
    "broadcast_object", "callbacks", "ccl_built", "cross_rank", "cross_size", "cuda_built",
    "ddl_built", "elastic", "gloo_built", "gloo_enabled", "init", "is_homogeneous", "is_initialized",
    "local_rank", "local_size", "mpi_built", "mpi_enabled", "mpi_threads_supported",
    "nccl_built", "rank", "reducescatter", "rocm_built", "shutdown", "size", "start_timeline",
    "stop_timeline",
]
