"""Python face of the ``TfxFusedReduce`` op: one reduction, across the devices of one
process, for a whole tensor list (exported as ``tfx_dist.fused_reduce``)."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

from tfx_dist import settings
from tfx_dist._ops import load_op_library

REDUCTIONS = ("sum", "mean", "min", "max")
DTYPES = (tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64)


# Loaded on import, so that `import tfx_dist` fails early with an
# OpLibraryError that says how to rebuild, rather than at the first step.
_OPS = load_op_library("_fused_reduce_ops")
settings.get("TFX_CPU_ISA")  # a bad value fails here; the kernel reads the variable itself


def fused_reduce(per_device: Sequence[Sequence[tf.Tensor]], reduction: str = "sum",
                 bucket_bytes: int | None = None) -> list[tf.Tensor]:
    """Reduces the same list of tensors, contributed by several devices, in one op.

    The op runs on the current device scope; every device's list must hold the
    same dtypes and shapes in the same order.

    Example:
    ```python
    a = [tf.ones([2]), tf.fill([3], 2.0)]
    b = [tf.ones([2]), tf.fill([3], 4.0)]
    fused_reduce([a, b], "mean")  # [[1., 1.], [3., 3., 3.]]
    ```

    Args:
      per_device: one list of tensors per device.
      reduction: one of "sum", "mean", "min", "max".
      bucket_bytes: bytes per unit of parallel work; defaults to the
        `TFX_LOCAL_FUSION_BYTES` setting.

    Returns:
      The reduced tensors, in the order of each device's list.

    Raises:
      ValueError: unknown reduction, or devices whose lists differ in length,
        dtype or shape.
    """
    flat, first, num_devices = _flat_inputs(per_device, reduction)
    if not first:
        return []
    return _fused_reduce_op(flat, first, num_devices, reduction, bucket_bytes, [])[0]


def fused_reduce_with_block(per_device: Sequence[Sequence[tf.Tensor]], reduction: str = "sum",
                            bucket_bytes: int | None = None) -> tuple[list[tf.Tensor], tf.Tensor]:
    """`fused_reduce` on the CPU that also returns the one buffer holding every result.

    `block_views` of that block on another device gives that device the results
    through one cross-device edge instead of one per tensor (the results never
    take over an input's buffer then). Same arguments as `fused_reduce`; the
    lists must not be empty and the shapes must be fully defined.
    """
    flat, first, num_devices = _flat_inputs(per_device, reduction)
    if not first or not all(t.shape.is_fully_defined() for t in first):
        raise ValueError("fused_reduce_with_block needs tensors of fully defined shapes. "
                         f"Received: {[t.shape for t in first]}")
    return _fused_reduce_op(flat, first, num_devices, reduction, bucket_bytes, [tf.uint8])


def block_views(block: tf.Tensor, like: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """The results in a `fused_reduce_with_block` block, as views (no copy) on the current device.

    ``like``: the reduced tensors (their dtypes and shapes), in order.
    """
    return list(_OPS.tfx_block_views(block=block, dtypes=[t.dtype for t in like],
                                     shapes=[t.shape for t in like]))


def _flat_inputs(per_device, reduction):
    """Validated op inputs (device-major), device 0's tensors, number of devices."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"Expected `reduction` to be one of {REDUCTIONS}. Received: "
                         f"reduction={reduction!r}")
    per_device = [list(values) for values in per_device]
    if not per_device:
        raise ValueError("Expected at least one device's tensor list. Received: per_device=[]")
    num_tensors = len(per_device[0])
    for d, values in enumerate(per_device):
        if len(values) != num_tensors:
            raise ValueError(f"Every device must contribute the same number of tensors: device 0 "
                             f"has {num_tensors}, device {d} has {len(values)}.")
    first = [tf.convert_to_tensor(t) for t in per_device[0]]
    for t in first:
        if t.dtype not in DTYPES:
            raise ValueError(f"Expected tensors of dtype {[d.name for d in DTYPES]}. "
                             f"Received: a tensor of dtype {t.dtype.name}")
    flat = first + [tf.convert_to_tensor(t) for values in per_device[1:] for t in values]
    return flat, first, len(per_device)


def _fused_reduce_op(flat, first, num_devices, reduction, bucket_bytes, block_type):
    bucket = int(settings.get("TFX_LOCAL_FUSION_BYTES", bucket_bytes))
    outputs, block = _OPS.tfx_fused_reduce(inputs=flat, Tout=[t.dtype for t in first],
                                           Tblock=block_type, num_devices=num_devices,
                                           reduction=reduction, bucket_bytes=bucket)
    return list(outputs), (block[0] if block else None)
