"""Horovod's ``SyncBatchNormalization`` for Keras 3: batch statistics over every rank's batch."""

from __future__ import annotations

import keras
import tensorflow as tf

from tfx_dist.horovod import basics, mpi_ops


@keras.saving.register_keras_serializable(package="tfx_dist.horovod")
class SyncBatchNormalization(keras.layers.BatchNormalization):
    """`keras.layers.BatchNormalization` whose training-time mean and variance are
    those of the global batch (every rank's batch together), as Horovod's.

    Each rank all-reduces (``Sum``) its sum, sum of squares and element count
    per channel; the all-reduce is differentiable, so the gradient flows to
    every rank's inputs. Inference uses the moving statistics, which are then
    the same on every rank.
    """

    def __init__(self, fused=False, **kwargs):
        if fused:
            raise ValueError("SyncBatchNormalization does not support fused=True.")
        super().__init__(**kwargs)

    def _moments(self, inputs, mask):
        if basics.size() == 1:
            return super()._moments(inputs, mask)
        axes = list(self._reduction_axes)
        if mask is None:
            weights = tf.ones_like(inputs)
        else:
            weights = tf.cast(tf.broadcast_to(tf.expand_dims(mask, -1), tf.shape(inputs)), inputs.dtype)
        total, squares, count = mpi_ops.grouped_allreduce(
            [tf.reduce_sum(inputs * weights, axes), tf.reduce_sum(tf.square(inputs) * weights, axes),
             tf.reduce_sum(weights, axes)], op=mpi_ops.Sum)
        count = tf.maximum(count, 1.0)
        mean = total / count
        variance = tf.maximum(squares / count - tf.square(mean), 0.0)  # E[x^2] - E[x]^2
        return mean, variance
