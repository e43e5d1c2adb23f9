"""Sums of embedding rows per index, the embedding layers' per-step row math.

`ShardedEmbedding` sums rows by index twice: the positions' gradients per
distinct id (every training step, on the critical path) and, with a combiner,
each example's rows. On CPU it runs tfx_dist's `TfxSumRowsByIndex` kernel
(`custom_ops/embedding/cc/kernels/row_kernels.cc`), which did that sum about 3x
faster than TensorFlow's ``scatter_nd`` (benchmarks/row_sum.py; BENCHMARKS.md,
"Measurements behind design choices"); other dtypes, and machines with a GPU (the kernel is CPU
only), use TensorFlow's ``unsorted_segment_sum``.
"""

from __future__ import annotations

import contextlib
import functools
import threading

import tensorflow as tf

from tfx_dist import _ops


@functools.lru_cache(maxsize=None)
def _cpu_only() -> bool:
    return not tf.config.list_logical_devices("GPU")


_plain = threading.local()


@contextlib.contextmanager
def tensorflow_ops_only():
    """Within it, traced functions use TensorFlow's ops only (a SavedModel for plain TensorFlow)."""
    before = getattr(_plain, "active", False)
    _plain.active = True
    try:
        yield
    finally:
        _plain.active = before


def sum_rows_by_index(rows, index, num_segments):
    """``tf.math.unsorted_segment_sum(rows, index, num_segments)`` of 2-D rows, with every
    index in ``[0, num_segments)`` (differentiable in ``rows``)."""
    rows = tf.convert_to_tensor(rows)
    if (rows.dtype != tf.float32 or rows.shape.rank != 2 or not _cpu_only()
            or getattr(_plain, "active", False)):
        return tf.math.unsorted_segment_sum(rows, index, num_segments)
    return _ops.load_op_library("_ps_ops").tfx_sum_rows_by_index(
        rows, index, tf.cast(num_segments, index.dtype))


@tf.RegisterGradient("TfxSumRowsByIndex")
def _sum_rows_by_index_grad(op, d_sums):
    return tf.gather(d_sums, op.inputs[1]), None, None
