"""Cross-device reductions of one process on tfx_dist's fused reduce op.

`FusedAllReduce` is a `tf.distribute.CrossDeviceOps`: a strategy hands it the
per-replica values of a whole gradient list at once (``batch_reduce``); it
reduces the dense tensors that live on the same devices in a few
``TfxFusedReduce`` ops (*packs*) on one device, then gives each other
destination device the result (on the CPU, TensorFlow shares the buffer
between devices, so nothing is copied). Sparse gradients (`tf.IndexedSlices`)
are concatenated, as TensorFlow does (a row per occurrence, as on one device). Dtypes
the op does not cover fall back to ``tf.add_n``.

Why packs rather than one op: an op starts only when all its inputs exist and
its consumers only when it ends. A few packs let TensorFlow reduce one pack
while it still computes the next pack's gradients, or hands the previous
pack's results to the other devices; each pack stays large enough that its
per-op cost does not show.
"""

from __future__ import annotations

import collections

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.reduce.local import DTYPES, block_views, fused_reduce, fused_reduce_with_block

_ReduceOp = tf.distribute.ReduceOp

# Automatic packs: at most this many per batch, none smaller than this.
MAX_PACKS = 4
MIN_PACK_BYTES = 256 << 10


def reduction_name(reduce_op) -> str:
    """"sum" or "mean" for a `tf.distribute.ReduceOp` or its name (any case)."""
    if isinstance(reduce_op, str):
        reduce_op = tfc.reduce_util.ReduceOp(reduce_op.upper())
    if reduce_op == _ReduceOp.SUM:
        return "sum"
    if reduce_op == _ReduceOp.MEAN:
        return "mean"
    raise ValueError(f"Expected `reduce_op` to be tf.distribute.ReduceOp.SUM or MEAN. "
                     f"Received: reduce_op={reduce_op!r}")


def _is_sparse(values) -> bool:
    return any(isinstance(v, tf.IndexedSlices) for v in values)


def _reduce_indexed_slices(values, reduction: str) -> tf.IndexedSlices:
    """Sums sparse gradients: their rows concatenated in replica order, as TensorFlow does.

    Rows with the same index are not merged: for a lookup such as
    `keras.layers.Embedding` the concatenation is one device's gradient of the
    whole batch (a row per occurrence), which optimizers that square the
    gradient (Adam, Adagrad, RMSprop, FTRL) apply row by row.
    """
    slices = [v if isinstance(v, tf.IndexedSlices)
              else tf.IndexedSlices(tf.convert_to_tensor(v),
                                    tf.range(tf.shape(v, out_type=tf.int64)[0]),
                                    tf.shape(v, out_type=tf.int64))
              for v in values]
    indices = tf.concat([tf.cast(s.indices, tf.int64) for s in slices], axis=0)
    rows = tf.concat([s.values for s in slices], axis=0)
    if reduction == "mean":
        rows = rows / tf.cast(len(slices), rows.dtype)
    return tf.IndexedSlices(rows, indices, slices[0].dense_shape)


def split_into_packs(nbytes: list[int | None], pack_bytes: int | None = None) -> list[list[int]]:
    """Cuts positions ``0..len(nbytes)-1`` into contiguous packs of about ``pack_bytes``.

    Without ``pack_bytes``, the total is spread over at most `MAX_PACKS` packs
    of at least `MIN_PACK_BYTES`. A size that is unknown when tracing (None)
    puts everything in one pack.
    """
    if not nbytes:
        return []
    if any(n is None for n in nbytes):
        return [list(range(len(nbytes)))]
    total = sum(nbytes)
    target = pack_bytes or max(MIN_PACK_BYTES, -(-total // MAX_PACKS))
    packs, size = [], target
    for i, n in enumerate(nbytes):
        if size >= target:  # the last pack is full: open another
            packs.append([])
            size = 0
        packs[-1].append(i)
        size += n
    return packs


def _nbytes(t) -> int | None:
    n = t.shape.num_elements()
    return None if n is None else n * t.dtype.size


class FusedAllReduce(tf.distribute.CrossDeviceOps):
    """All-reduce across the devices of one process in a few fused ops per batch.

    Example:
    ```python
    strategy = tf.distribute.MirroredStrategy(
        ["/cpu:0", "/cpu:1"], cross_device_ops=tfx_dist.FusedAllReduce())
    ```
    (`tfx_dist.MirroredStrategy` uses it by default.)

    Args:
      reduce_to_device: the device that runs the reduction; defaults to the
        first destination device.
      bucket_bytes: bytes per unit of parallel work inside one op; defaults to
        the `TFX_LOCAL_FUSION_BYTES` setting.

    A ``tf.distribute.experimental.CommunicationOptions(bytes_per_pack=...)``
    passed to a reduction sets the pack size (see the module docstring);
    otherwise a batch is cut into at most 4 packs of at least 256 KiB.
    """

    def __init__(self, reduce_to_device: str | None = None, bucket_bytes: int | None = None):
        super().__init__()
        self.reduce_to_device = reduce_to_device
        self.bucket_bytes = bucket_bytes

    def _reduce_device(self, per_replica_value, destinations) -> str:
        if self.reduce_to_device:
            return self.reduce_to_device
        source = (destinations if tfc.cross_device_ops_lib.check_destinations(destinations)
                  else per_replica_value)
        return tfc.cross_device_ops_lib.get_devices_from(source, self._canonicalize_devices)[0]

    def reduce_implementation(self, reduce_op, per_replica_value, destinations, options):
        return self.batch_reduce_implementation(
            reduce_op, [(per_replica_value, destinations)], options)[0]

    def batch_reduce_implementation(self, reduce_op, value_destination_pairs, options):
        reduction = reduction_name(reduce_op)
        pack_bytes = getattr(options, "bytes_per_pack", 0) or None
        reduced = [None] * len(value_destination_pairs)
        reduce_devices = [None] * len(value_destination_pairs)
        # Dense values on the same devices, reduced on the same device, share ops (packs).
        groups = collections.defaultdict(list)  # (device, devices, op reduction) -> indices
        dense_values = {}
        for i, (value, destinations) in enumerate(value_destination_pairs):
            values = list(getattr(value, "values", (value,)))
            device = reduce_devices[i] = self._reduce_device(value, destinations)
            if _is_sparse(values):
                with tf.device(device):
                    reduced[i] = _reduce_indexed_slices(values, reduction)
                continue
            values = [tf.convert_to_tensor(v) for v in values]
            if values[0].dtype not in DTYPES:
                with tf.device(device):
                    total = tf.add_n(values)
                    reduced[i] = total / len(values) if reduction == "mean" else total
                continue
            # TensorFlow's integer mean is a true division (a float result):
            # integers are summed by the op and divided afterwards.
            op_reduction = "sum" if values[0].dtype.is_integer else reduction
            groups[(device, len(values), op_reduction)].append(i)
            dense_values[i] = values
        destinations = [self._devices_of(d) for _, d in value_destination_pairs]
        handed = {}  # index -> {device: the result there}, from a block's views
        for (device, num_devices, op_reduction), members in groups.items():
            sizes = [_nbytes(dense_values[i][0]) for i in members]
            for pack in split_into_packs(sizes, pack_bytes):
                pack = [members[p] for p in pack]
                per_device = [[dense_values[i][d] for i in pack] for d in range(num_devices)]
                others = self._block_receivers(device, [destinations[i] for i in pack],
                                               per_device[0], op_reduction == reduction)
                with tf.device(device):
                    if others:
                        results, block = fused_reduce_with_block(per_device, op_reduction,
                                                                 self.bucket_bytes)
                    else:
                        results = fused_reduce(per_device, op_reduction, self.bucket_bytes)
                    if op_reduction != reduction:
                        results = [r / num_devices for r in results]
                for other in others:
                    with tf.device(other):
                        for i, view in zip(pack, block_views(block, results)):
                            handed.setdefault(i, {})[other] = view
                for i, result in zip(pack, results):
                    reduced[i] = result
        return self._to_destinations(reduced, destinations, reduce_devices, handed)

    def _devices_of(self, destinations) -> list[str]:
        return [tfc.device_util.canonicalize(d) for d in
                tfc.cross_device_ops_lib.get_devices_from(destinations, self._canonicalize_devices)]

    @staticmethod
    def _block_receivers(device, destinations, values, plain) -> list[str]:
        """The devices that get a pack's results as views of its block: on the CPU,
        every other destination, when all the pack's results go to the same devices,
        the op's outputs are the results (``plain``) and their shapes are known."""
        here = tfc.device_util.canonicalize(device)
        others = [d for d in destinations[0] if d != here]
        if (not plain or not others or any(d != destinations[0] for d in destinations)
                or not all(t.shape.is_fully_defined() for t in values)):
            return []
        if any(tf.DeviceSpec.from_string(d).device_type != "CPU" for d in [here] + others):
            return []
        return others

    def _to_destinations(self, results, destinations, reduce_devices, handed=None):
        """Mirrored values of ``results[i]`` on the devices ``destinations[i]``.

        The device that reduced keeps the result itself. Another device takes
        the views ``handed`` to it (``handed[i][device]``), or else gets the
        dense results it needs from ONE ``IdentityN``: TensorFlow's broadcast
        would add an ``Identity`` per tensor and device, and on the CPU each
        such cross-device edge costs more than reducing a small tensor.
        """
        handed = handed or {}
        placed = []  # per result: canonical device -> the value there
        copies = collections.defaultdict(list)  # device -> indices of dense results to copy
        for i, (result, devices) in enumerate(zip(results, destinations)):
            here = tfc.device_util.canonicalize(reduce_devices[i])
            placed.append(dict.fromkeys(devices))
            for d in devices:
                if d == here:
                    placed[i][d] = result
                elif d in handed.get(i, {}):
                    placed[i][d] = handed[i][d]
                elif isinstance(result, tf.IndexedSlices):
                    placed[i][d] = tfc.cross_device_utils.copy_tensor_or_indexed_slices_to_device(
                        result, d)
                else:
                    copies[d].append(i)
        for d, members in copies.items():
            with tf.device(d):
                for i, copy in zip(members, tf.identity_n([results[i] for i in members])):
                    placed[i][d] = copy
        return [tfc.distribute_utils.regroup(list(values.values()),
                                             wrap_class=tfc.values_lib.Mirrored)
                for values in placed]

    def _gather_implementation(self, per_replica_value, destinations, axis, options):
        values = list(getattr(per_replica_value, "values", (per_replica_value,)))
        with tf.device(self._reduce_device(per_replica_value, destinations)):
            gathered = tf.concat([tf.convert_to_tensor(v) for v in values], axis=axis)
        return self.broadcast(gathered, destinations)
