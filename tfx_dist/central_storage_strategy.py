"""`tfx_dist.CentralStorageStrategy`: variables on one device, compute replicated."""

from __future__ import annotations

import tensorflow as tf

from tfx_dist.cross_device_ops import FusedAllReduce


class CentralStorageStrategy(tf.distribute.experimental.CentralStorageStrategy):
    """Keeps every variable on one device and replicates compute on the others.

    For one machine whose accelerators lack the memory for a copy of the model
    each: variables and optimizer slots live on the parameter device (the CPU
    by default), every compute device reads them, and gradients are reduced
    onto the parameter device in one fused op (a reduction to one device, not
    an all-reduce), where the optimizer applies them.

    A drop-in for, and an instance of,
    `tf.distribute.experimental.CentralStorageStrategy`.

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
        `TFX_FUSION_BUCKET_BYTES` setting.
    """

    def __init__(self, compute_devices=None, parameter_device=None, *,
                 fusion_bucket_bytes=None):
        super().__init__(compute_devices=compute_devices, parameter_device=parameter_device)
        # TensorFlow reduces with add_n on its own; reduce to the device that
        # holds the variables instead, so nothing is copied back.
        self.extended._cross_device_ops = FusedAllReduce(  # pylint: disable=protected-access
            reduce_to_device=self.extended.parameter_devices[0],
            bucket_bytes=fusion_bucket_bytes)

    @property
    def parameter_device(self) -> str:
        """The device that holds every variable."""
        return self.extended.parameter_devices[0]
