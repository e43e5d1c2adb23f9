"""TfxFusedReduce against numpy: every dtype, reduction, device count and odd size."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tfx_dist import fused_reduce


NUMPY_REDUCE = {
    "sum": lambda xs: np.sum(xs, axis=0),
    "min": lambda xs: np.min(xs, axis=0),
    "max": lambda xs: np.max(xs, axis=0),
}
SHAPES = [(0,), (1,), (7,), (3, 5), (2049,), (1, 3, 0), (100003,)]


def _contributions(dtype, num_devices, rng):
    per_device = []
    for _ in range(num_devices):
        values = []
        for shape in SHAPES:
            if dtype.is_integer:
                values.append(rng.integers(-1000, 1000, size=shape).astype(dtype.as_numpy_dtype))
            else:
                values.append(rng.normal(size=shape).astype(dtype.as_numpy_dtype))
        per_device.append(values)
    return per_device


def _expected(per_device, reduction, dtype):
    out = []
    for k in range(len(per_device[0])):
        stacked = np.stack([d[k].astype(np.float64) for d in per_device])
        if reduction == "mean":
            if dtype.is_integer:
                summed = np.sum(stacked, axis=0)
                out.append(np.trunc(summed / len(per_device)))
            else:
                out.append(np.mean(stacked, axis=0))
        else:
            out.append(NUMPY_REDUCE[reduction](stacked))
    return out


TOLERANCE = {tf.float16: 1e-2, tf.bfloat16: 5e-2, tf.float32: 1e-5, tf.float64: 1e-12,
             tf.int32: 0, tf.int64: 0}


# The ops' own tests are in the smoke set (every supported TensorFlow minor), but for the
# long sizes and the instruction sets (minutes, and nothing there depends on TensorFlow's version).
@pytest.mark.smoke
@pytest.mark.parametrize("dtype", list(TOLERANCE), ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("num_devices", [1, 2, 3, 4])
def test_matches_numpy(dtype, reduction, num_devices):
    rng = np.random.default_rng(num_devices)
    per_device = _contributions(dtype, num_devices, rng)
    tensors = [[tf.constant(v) for v in values] for values in per_device]
    # A small bucket forces small tensors to share buckets and big ones to split.
    results = fused_reduce(tensors, reduction, bucket_bytes=4096)
    for got, want, shape in zip(results, _expected(per_device, reduction, dtype), SHAPES):
        assert got.dtype == dtype and tuple(got.shape) == shape
        np.testing.assert_allclose(got.numpy().astype(np.float64), want,
                                   rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


@pytest.mark.parametrize("dtype", [tf.float32, tf.float64, tf.int32, tf.int64], ids=lambda d: d.name)
@pytest.mark.parametrize("reduction", ["sum", "mean", "min", "max"])
@pytest.mark.parametrize("num_devices", [2, 5])
def test_large_calls_match_numpy(dtype, reduction, num_devices):
    """Over 8 MiB of results: the kernel writes them with streaming stores.
    Odd sizes and small buckets put spans at every alignment; 5 devices take
    two passes, of which only the last streams."""
    rng = np.random.default_rng(7)
    elements = (8 << 20) // dtype.size + 1001
    shapes = [(3,), (elements,), (5, 7), (1,)]
    per_device = []
    for _ in range(num_devices):
        if dtype.is_integer:
            per_device.append([rng.integers(-1000, 1000, size=s).astype(dtype.as_numpy_dtype)
                               for s in shapes])
        else:
            per_device.append([rng.normal(size=s).astype(dtype.as_numpy_dtype) for s in shapes])
    tensors = [[tf.constant(v) for v in values] for values in per_device]
    results = fused_reduce(tensors, reduction, bucket_bytes=(1 << 20) + 12)
    for got, want in zip(results, _expected(per_device, reduction, dtype)):
        np.testing.assert_allclose(got.numpy().astype(np.float64), want,
                                   rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])


# Run in a fresh process: the kernel reads TFX_CPU_ISA once.
_MATCHES_NUMPY = """
import numpy as np, tensorflow as tf
from tfx_dist import fused_reduce
rng = np.random.default_rng(3)
for dtype in (np.float32, np.int64):
    for devices in (2, 4, 5):
        # Under and over 8 MiB of results (streaming stores), odd sizes.
        shapes = [(3,), ((8 << 20) // 4 + 1001,), (100003,)]
        xs = [[rng.integers(-1000, 1000, size=s).astype(dtype) for s in shapes]
              for _ in range(devices)]
        for reduction, ref in (("sum", np.sum), ("max", np.max)):
            got = fused_reduce([[tf.constant(x) for x in d] for d in xs], reduction,
                               bucket_bytes=(1 << 20) + 12)
            for k, g in enumerate(got):
                np.testing.assert_array_equal(g.numpy(), ref(np.stack([d[k] for d in xs]), 0))
print("ok")
"""


@pytest.mark.parametrize("isa", ["baseline", "auto"])
def test_each_instruction_set_matches_numpy(isa):
    """The kernel keeps two copies of its passes (AVX2, chosen at run time, and
    the build's own): whichever TFX_CPU_ISA selects gives numpy's results."""
    env = dict(os.environ, TFX_CPU_ISA=isa, CUDA_VISIBLE_DEVICES="")
    run = subprocess.run([sys.executable, "-c", _MATCHES_NUMPY], env=env, text=True,
                         capture_output=True, timeout=300)
    assert run.returncode == 0 and "ok" in run.stdout.split(), run.stderr[-3000:]


@pytest.mark.smoke
def test_inputs_survive_in_place_reduction():
    a, b = tf.constant([1.0, 2.0]), tf.constant([10.0, 20.0])
    (out,) = fused_reduce([[a], [b]], "sum")
    np.testing.assert_array_equal(out.numpy(), [11.0, 22.0])
    np.testing.assert_array_equal(a.numpy(), [1.0, 2.0])  # still referenced: not overwritten


@pytest.mark.smoke
def test_mixed_dtypes_in_one_call():
    per_device = [[tf.constant([1.0]), tf.constant([2], tf.int64), tf.constant([0.5], tf.float16)]
                  for _ in range(3)]
    out = fused_reduce(per_device, "sum")
    assert [t.numpy().tolist() for t in out] == [[3.0], [6], [1.5]]


@pytest.mark.smoke
def test_works_inside_tf_function_across_devices():
    @tf.function
    def step():
        per_device = []
        for i in range(4):
            with tf.device(f"/cpu:{i}"):
                per_device.append([tf.fill([5], float(i)), tf.range(3)])
        with tf.device("/cpu:0"):
            return fused_reduce(per_device, "mean")

    floats, ints = step()
    np.testing.assert_allclose(floats.numpy(), [1.5] * 5)
    np.testing.assert_array_equal(ints.numpy(), [0, 1, 2])


@pytest.mark.smoke
def test_shape_mismatch_is_a_clear_error_eagerly():
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"tensor 0 of 1 is float\[2\] on device 0 but float\[3\] on device 1"):
        fused_reduce([[tf.ones([2])], [tf.ones([3])]])


@pytest.mark.smoke
def test_dtype_mismatch_is_a_clear_error():
    with pytest.raises(tf.errors.InvalidArgumentError, match="same dtypes and shapes"):
        fused_reduce([[tf.ones([2])], [tf.ones([2], tf.float64)]])


@pytest.mark.smoke
def test_shape_mismatch_is_caught_when_tracing():
    @tf.function
    def bad():
        return fused_reduce([[tf.ones([2])], [tf.ones([3])]])

    with pytest.raises(ValueError, match=r"tensor 0 has shape \[2\] on device 0 but \[3\] on device 1"):
        bad.get_concrete_function()


@pytest.mark.parametrize("kwargs, message", [
    (dict(per_device=[], reduction="sum"), "at least one device"),
    (dict(per_device=[[tf.ones([1])], []], reduction="sum"), "device 0 has 1, device 1 has 0"),
    (dict(per_device=[[tf.ones([1])]], reduction="prod"), "Expected `reduction`"),
    (dict(per_device=[[tf.constant([True])]], reduction="sum"), "dtype bool"),
])
@pytest.mark.smoke
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        fused_reduce(**kwargs)


@pytest.mark.smoke
def test_public_name_stays_the_function_after_strategies_load():
    import tfx_dist

    tfx_dist.MirroredStrategy  # imports cross_device_ops and the op's module
    assert callable(tfx_dist.fused_reduce)


def _address(t):
    return np.asarray(t).__array_interface__["data"][0]


@pytest.mark.smoke
def test_outputs_that_take_over_no_input_reuse_released_memory():
    # Variables' values cannot be overwritten, so every output comes from the
    # kernel's arena: odd sizes and mixed dtypes share one block, 64-byte aligned.
    shapes = [(7,), (3, 5), (0,), (2049,)]
    dtypes = [tf.float32, tf.float64, tf.float32, tf.int32]
    variables = [[tf.Variable(tf.cast(tf.fill(s, d + 1), t)) for s, t in zip(shapes, dtypes)]
                 for d in range(2)]

    def reduce_now():
        return fused_reduce([[v.read_value() for v in vs] for vs in variables], "sum")

    first = reduce_now()
    for out in first:
        assert _address(out) % 64 == 0 or out.shape.num_elements() == 0
    for out, shape in zip(first, shapes):
        np.testing.assert_array_equal(out.numpy(), np.full(shape, 3))
    # While `first` is alive its block is in use: a new call must not clobber it.
    for vs in variables:
        for v in vs:
            v.assign(v * 10)
    second = reduce_now()
    for old, new, shape in zip(first, second, shapes):
        np.testing.assert_array_equal(old.numpy(), np.full(shape, 3))
        np.testing.assert_array_equal(new.numpy(), np.full(shape, 30))
    # Once every view of a block is released, the next call reuses its memory.
    released = {_address(first[0]), _address(second[0])}
    del first, second, old, new, out
    third = reduce_now()
    assert _address(third[0]) in released
    np.testing.assert_array_equal(third[3].numpy(), np.full(shapes[3], 30))


@pytest.mark.smoke
def test_block_views_on_another_device_share_the_results_memory():
    from tfx_dist.reduce.local import block_views, fused_reduce_with_block

    shapes = [(7,), (3, 5), (2049,)]
    dtypes = [tf.float32, tf.float64, tf.int32]
    variables = [[tf.Variable(tf.cast(tf.fill(s, d + 1), t)) for s, t in zip(shapes, dtypes)]
                 for d in range(2)]

    def reduce_now():
        with tf.device("/cpu:0"):
            outputs, block = fused_reduce_with_block(
                [[v.read_value() for v in vs] for vs in variables], "sum")
        with tf.device("/cpu:1"):
            return outputs, block_views(block, outputs)

    outputs, views = reduce_now()
    for out, view, shape, dtype in zip(outputs, views, shapes, dtypes):
        assert view.dtype == dtype and view.shape == shape
        assert "CPU:1" in view.device
        assert _address(view) == _address(out)  # a view, not a copy
        np.testing.assert_array_equal(view.numpy(), np.full(shape, 3))
    # Views on the other device keep the block in use: the next call writes elsewhere.
    del outputs
    for vs in variables:
        for v in vs:
            v.assign(v * 10)
    _, newer = reduce_now()
    for view, new, shape in zip(views, newer, shapes):
        np.testing.assert_array_equal(view.numpy(), np.full(shape, 3))
        np.testing.assert_array_equal(new.numpy(), np.full(shape, 30))


@pytest.mark.smoke
def test_block_views_refuse_a_block_too_small():
    from tfx_dist.reduce.local import block_views, fused_reduce_with_block

    outputs, block = fused_reduce_with_block([[tf.ones([4])], [tf.ones([4])]])
    with pytest.raises(tf.errors.InvalidArgumentError, match="the outputs need"):
        block_views(block[:8], outputs)
    with pytest.raises(ValueError, match="fully defined"):
        fused_reduce_with_block([[]])
