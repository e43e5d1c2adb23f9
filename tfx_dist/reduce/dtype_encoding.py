"""The dtypes tfx_dist's collectives take, and how every other dtype is carried
through them (used by the cross-worker reductions and by the Horovod API)."""

import tensorflow as tf

# Dtypes tfx_dist's collectives take. Others are converted around the call:
# for reductions by a value cast to a wider type, for gather and broadcast
# (which only move bytes) by a bitcast to uint8.
_REDUCE_DTYPES = frozenset([tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int32, tf.int64])
_MOVE_DTYPES = _REDUCE_DTYPES | {tf.uint8}
_REDUCE_AS = {tf.bool: tf.int32, tf.int8: tf.int32, tf.int16: tf.int32, tf.uint8: tf.int32,
              tf.uint16: tf.int32, tf.uint32: tf.int64}


def reduced_as_is(dtype) -> bool:
    """Whether tfx_dist's collectives reduce ``dtype`` itself (not carried as another)."""
    return dtype in _REDUCE_DTYPES


def encode_for_reduce(t):
    """Returns (tensor the transport can sum, function that restores the dtype)."""
    if t.dtype in _REDUCE_DTYPES:
        return t, lambda r: r
    if t.dtype in _REDUCE_AS:
        return tf.cast(t, _REDUCE_AS[t.dtype]), lambda r, d=t.dtype: tf.cast(r, d)
    if t.dtype == tf.uint64:  # two's complement sums agree modulo 2**64
        return tf.bitcast(t, tf.int64), lambda r: tf.bitcast(r, tf.uint64)
    raise TypeError(f"Cannot all-reduce a tensor of dtype {t.dtype.name} across workers: "
                    f"expected a numeric or bool dtype. Received: {t}")


def encode_for_move(t):
    """Returns (tensor the transport can gather/broadcast, function that restores it)."""
    if t.dtype in _MOVE_DTYPES:
        return t, lambda r: r
    if t.dtype == tf.bool:
        return tf.cast(t, tf.uint8), lambda r: tf.cast(r, tf.bool)
    if t.dtype.is_numpy_compatible and t.dtype.size > 0 and t.dtype != tf.string:
        return tf.bitcast(t, tf.uint8), lambda r, d=t.dtype: tf.bitcast(r, d)
    raise TypeError(f"Cannot send a tensor of dtype {t.dtype.name} to other workers: "
                    f"expected a numeric or bool dtype. Received: {t}")
