"""`tfx_dist.CentralStorageStrategy`: variables on one device, compute replicated."""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.reduce.cross_device import FusedAllReduce
from tfx_dist.input.strategy_input import StrategyInput
from tfx_dist.strategies.uneven_batches import ReplicaLossShares


class _CentralStorageExtended(ReplicaLossShares, StrategyInput,
                              tfc.parameter_server_lib.ParameterServerStrategyExtended):
    """TensorFlow's extension, reducing onto the parameter device with our op.

    Two fixes for Keras 3:

    * Its random layers (Dropout, ...) keep their seed in a non-trainable
      variable with aggregation NONE and assign it in replica context, which
      TensorFlow's AggregatingVariable refuses ("You must specify an
      aggregation method"), so TensorFlow's own strategy fails on the first
      `fit` of such a model. Every replica writes the same value there, so
      taking the first replica's is exact, as each copy of MirroredStrategy
      would hold.
    * Metric state (``synchronization=ON_READ``, aggregation SUM: a metric's
      total and count) gets one copy per replica, as under MirroredStrategy,
      summed when read. TensorFlow's strategy makes it one AggregatingVariable
      that sums what the replicas write, but Keras 3's ``assign_add(x)`` is
      ``assign(self + x)``: with R replicas the variable became
      ``R * total + sum(x)`` at each update, so `evaluate` and the `fit`
      history reported wrong loss and metrics (TensorFlow's own strategy too).

    Input as every tfx_dist strategy adopts it (see tfx_dist.input); uneven
    batches as on one device (see tfx_dist.strategies.uneven_batches).
    """

    def __init__(self, container_strategy, compute_devices, parameter_device, bucket_bytes):
        super().__init__(container_strategy, compute_devices=compute_devices,
                         parameter_device=parameter_device)
        self._cross_device_ops = FusedAllReduce(reduce_to_device=self.parameter_devices[0],
                                                bucket_bytes=bucket_bytes)

    def _create_variable(self, next_creator, **kwargs):
        if (kwargs.get("synchronization") == tf.VariableSynchronization.ON_READ
                and "colocate_with" not in kwargs and self._num_replicas_in_sync > 1):
            return self._create_per_replica_variable(next_creator, **kwargs)
        if (not kwargs.get("trainable", True)
                and kwargs.get("aggregation") in (None, tf.VariableAggregation.NONE)):
            kwargs["aggregation"] = tf.VariableAggregation.ONLY_FIRST_REPLICA
        return super()._create_variable(next_creator, **kwargs)

    def _create_per_replica_variable(self, next_creator, **kwargs):
        """A SyncOnReadVariable: one copy per replica, on the parameter device."""
        def create_copies(**kwargs):
            copies = []
            with tf.device(self.parameter_devices[0]):
                for i in range(self._num_replicas_in_sync):
                    if copies:
                        primary = copies[0]
                        kwargs["initial_value"] = lambda: tf.identity(primary.read_value())
                        kwargs["name"] = f"{primary.name.split(':')[0]}/replica_{i}/"
                    copies.append(next_creator(**kwargs))
            return copies

        return tfc.distribute_utils.create_mirrored_variable(
            self._container_strategy(), create_copies,
            tfc.distribute_utils.VARIABLE_CLASS_MAPPING,
            tfc.distribute_utils.VARIABLE_POLICY_MAPPING, **kwargs)


class CentralStorageStrategy(tf.distribute.experimental.CentralStorageStrategy):
    """Keeps every variable on one device and replicates compute on the others.

    For one machine whose accelerators lack the memory for a copy of the model
    each: variables and optimizer slots live on the parameter device (the CPU
    by default), every compute device reads them, and gradients are reduced
    onto the parameter device in one fused op (a reduction to one device, not
    an all-reduce), where the optimizer applies them.

    A drop-in for, and an instance of,
    `tf.distribute.experimental.CentralStorageStrategy`; unlike TensorFlow's,
    it trains Keras 3 models with Dropout and other random layers.

    Example:
    ```python
    strategy = tfx_dist.CentralStorageStrategy(["/gpu:0", "/gpu:1"])
    with strategy.scope():
        model = build_model()
        model.compile("adam", "sparse_categorical_crossentropy")
    model.fit(dataset)
    ```

    Args:
      compute_devices: the devices that run replicas; defaults to every GPU,
        or the CPU when there is none.
      parameter_device: the device that holds the variables; defaults to the
        CPU, or the only GPU when there is exactly one.
      fusion_bucket_bytes: bytes per fusion bucket; defaults to the
        `TFX_LOCAL_FUSION_BYTES` setting.
    """

    def __init__(self, compute_devices=None, parameter_device=None, *,
                 fusion_bucket_bytes=None):
        # TensorFlow's __init__ only builds its own extended object: build ours.
        tfc.distribute_lib.Strategy.__init__(self, _CentralStorageExtended(
            self, compute_devices, parameter_device, fusion_bucket_bytes))
        tfc.build_from_first_replica(type(self))

    @property
    def parameter_device(self) -> str:
        """The device that holds every variable."""
        return self.extended.parameter_devices[0]
