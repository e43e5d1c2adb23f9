"""`TfxSumRowsByIndex` (tfx_dist.layers.row_ops): the sum of rows per index that
ShardedEmbedding runs every step, against TensorFlow's unsorted_segment_sum."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tfx_dist import _ops
from tfx_dist.layers import row_ops

# The ops' own tests: part of the smoke set run on every supported TensorFlow minor.
pytestmark = pytest.mark.smoke


def _op(rows, index, num_segments):
    return _ops.load_op_library("_ps_ops").tfx_sum_rows_by_index(rows, index, num_segments)


@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_sums_equal_unsorted_segment_sum(index_dtype):
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(5000, 64)).astype(np.float32)
    # Zipf-like repeats, and segments that no row names (they must be zero).
    index = (rng.zipf(1.3, 5000) % 900).astype(index_dtype)
    got = _op(rows, index, index_dtype(1000)).numpy()
    want = tf.math.unsorted_segment_sum(rows, index, 1000).numpy()
    assert got.shape == (1000, 64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not got[900:].any() and got[:900].any()


def test_in_a_tf_function_shapes_and_gradient():
    rows = tf.constant(np.arange(24, dtype=np.float32).reshape(6, 4))
    index = tf.constant([2, 0, 2, 1, 0, 2])
    weights = tf.constant([[1.0], [2.0], [3.0]])

    @tf.function
    def loss_and_grad(r):
        with tf.GradientTape() as tape:
            tape.watch(r)
            sums = row_ops.sum_rows_by_index(r, index, 3)
            loss = tf.reduce_sum(sums * weights)
        return sums, tape.gradient(loss, r)

    concrete = tf.function(lambda r: _op(r, index, 3)).get_concrete_function(
        tf.TensorSpec([None, 4], tf.float32))
    assert concrete.output_shapes.as_list() == [3, 4]
    sums, grad = loss_and_grad(rows)
    np.testing.assert_array_equal(sums.numpy(), tf.math.unsorted_segment_sum(rows, index, 3).numpy())
    # d loss / d rows[i] = weights[index[i]] for every column.
    np.testing.assert_array_equal(grad.numpy(), np.repeat(weights.numpy()[index.numpy()], 4, axis=1))
    assert any(op.type == "TfxSumRowsByIndex"
               for op in loss_and_grad.get_concrete_function(rows).graph.get_operations())


def test_no_rows_gives_zeros():
    got = _op(np.zeros((0, 3), np.float32), np.zeros((0,), np.int32), 4).numpy()
    np.testing.assert_array_equal(got, np.zeros((4, 3), np.float32))


@pytest.mark.parametrize("bad", [-1, 7])
def test_index_out_of_range_is_an_error_naming_it(bad):
    with pytest.raises(tf.errors.InvalidArgumentError, match=rf"index\[2\] = {bad} is not in \[0, 7\)"):
        _op(np.ones((3, 2), np.float32), np.array([0, 1, bad], np.int32), 7)


def test_mismatched_shapes_are_an_error():
    with pytest.raises((tf.errors.InvalidArgumentError, ValueError), match="index"):
        _op(np.ones((3, 2), np.float32), np.array([0, 1], np.int32), 2)
