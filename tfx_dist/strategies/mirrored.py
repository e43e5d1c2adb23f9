"""`tfx_dist.MirroredStrategy`: TensorFlow's MirroredStrategy on the fused reduce op."""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.reduce.cross_device import FusedAllReduce
from tfx_dist.input.strategy_input import StrategyInput
from tfx_dist.strategies.uneven_batches import ReplicaLossShares


class _FusedMirroredExtended(ReplicaLossShares, StrategyInput,
                             tfc.mirrored_strategy.MirroredExtended):
    """TensorFlow's MirroredExtended, but int32 values too go through our op.

    TensorFlow sends int32 values to ReductionToOneDevice because NCCL has no
    int32 path; the fused op has one. Under XLA (no merge call) TensorFlow's
    collectives stay in charge: the fused op has no XLA kernel. Input as
    every tfx_dist strategy adopts it (see tfx_dist.input); uneven batches
    as on one device (see tfx_dist.strategies.uneven_batches).
    """

    def _get_cross_device_ops(self, value):
        if not self._use_merge_call():
            return super()._get_cross_device_ops(value)
        return self._cross_device_ops


class MirroredStrategy(tf.distribute.MirroredStrategy):
    """Synchronous data parallelism over the devices of one machine.

    A drop-in for `tf.distribute.MirroredStrategy` (and an instance of it):
    variables are mirrored on every device, each replica computes on its slice
    of the batch, and gradients are reduced across devices with tfx_dist's
    fused all-reduce: one op for the whole gradient list per step, reduced in
    parallel buckets, with no staging copies.

    Example:
    ```python
    strategy = tfx_dist.MirroredStrategy()
    with strategy.scope():
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(10)])
        model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(dataset, epochs=2)
    ```

    Args:
      devices: the devices to replicate on; defaults to every GPU, or the
        CPU when there is none (as TensorFlow's).
      cross_device_ops: a `tf.distribute.CrossDeviceOps` to use instead of
        `tfx_dist.FusedAllReduce`.
      fusion_bucket_bytes: bytes per fusion bucket; defaults to the
        `TFX_LOCAL_FUSION_BYTES` setting.
    """

    def __init__(self, devices=None, cross_device_ops=None, *, fusion_bucket_bytes=None):
        if cross_device_ops is None:
            cross_device_ops = FusedAllReduce(bucket_bytes=fusion_bucket_bytes)
        # TensorFlow's __init__ only builds its own extended object: build ours.
        tfc.distribute_lib.Strategy.__init__(
            self, _FusedMirroredExtended(self, devices=devices, cross_device_ops=cross_device_ops))
        tfc.build_from_first_replica(type(self))
