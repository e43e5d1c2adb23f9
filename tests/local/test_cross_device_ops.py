"""FusedAllReduce on its own: packs, where results live, agreement with TensorFlow's."""

import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from tfx_dist.reduce.cross_device import MAX_PACKS, MIN_PACK_BYTES, split_into_packs

DEVICES = ["/cpu:0", "/cpu:1", "/cpu:2"]


@pytest.mark.parametrize("nbytes, pack_bytes, expected", [
    ([], None, []),
    ([100, 200, 300], None, [[0, 1, 2]]),                      # all under one minimum pack
    ([MIN_PACK_BYTES] * 3, None, [[0], [1], [2]]),
    ([1 << 20] * 20, None, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14],
                            [15, 16, 17, 18, 19]]),
    ([10, 10, 10, 10], 20, [[0, 1], [2, 3]]),
    ([50, 10, 10], 20, [[0], [1, 2]]),                           # a big tensor gets its own
    ([10, None, 10], 20, [[0, 1, 2]]),                           # unknown size: one pack
])
def test_split_into_packs(nbytes, pack_bytes, expected):
    assert split_into_packs(nbytes, pack_bytes) == expected


def test_split_into_packs_keeps_order_and_bounds_the_count():
    packs = split_into_packs([3000 + i for i in range(1000)])
    assert [i for p in packs for i in p] == list(range(1000))
    assert len(packs) <= MAX_PACKS


def _per_replica(shapes, dtype=tf.float32):
    """PerReplica values: device d holds tensors filled with d + 1."""
    from tensorflow.python.distribute import values as values_lib

    out = []
    for shape in shapes:
        parts = []
        for d, device in enumerate(DEVICES):
            with tf.device(device):
                parts.append(tf.fill(shape, tf.constant(d + 1, dtype)))
        out.append(values_lib.PerReplica(parts))
    return out


def _batch_reduce(ops, shapes, options=None, dtype=tf.float32,
                  reduce_op=tf.distribute.ReduceOp.SUM):
    @tf.function
    def step():
        values = _per_replica(shapes, dtype)
        reduced = ops.batch_reduce(reduce_op, [(v, v) for v in values], options=options)
        return [list(m.values) for m in reduced]

    graph = step.get_concrete_function().graph
    fused = [op for op in graph.get_operations() if op.type == "TfxFusedReduce"]
    return step(), fused, graph


SHAPES = [(3, 5), (7,)] + [(MIN_PACK_BYTES // 4,)] * 8


def test_batch_is_reduced_in_packs_and_matches_tensorflow():
    ours, fused, _ = _batch_reduce(tfx_dist.FusedAllReduce(), SHAPES)
    theirs, _, _ = _batch_reduce(tf.distribute.ReductionToOneDevice(), SHAPES)
    planned = split_into_packs([4 * int(np.prod(s)) for s in SHAPES])
    assert len(fused) == len(planned) > 1
    assert sum(len(op.get_attr("Tout")) for op in fused) == len(SHAPES)
    for mine, tfs in zip(ours, theirs):
        assert len(mine) == len(DEVICES)
        for a, b in zip(mine, tfs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            np.testing.assert_array_equal(a.numpy(), np.full(a.shape, 6.0))


def test_bytes_per_pack_sets_the_pack_size():
    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=1 << 30)
    _, fused, _ = _batch_reduce(tfx_dist.FusedAllReduce(), SHAPES, options)
    assert len(fused) == 1


def _takers(graph, op):
    """(type, device) of the ops that take `op`'s results onto other devices."""
    return sorted((o.type, o.device[-5:]) for o in graph.get_operations()
                  if o.type in ("Identity", "IdentityN", "TfxBlockViews") and o.device
                  and o.inputs and o.inputs[0].op is op)


def test_reducing_device_keeps_the_results_and_each_other_device_views_its_block():
    shapes = [(4,), (3, 2), (5,)]
    results, fused, graph = _batch_reduce(tfx_dist.FusedAllReduce(), shapes)
    (op,) = fused
    assert "CPU:0" in op.device
    # One edge per other device (the block), not one per tensor and device.
    assert _takers(graph, op) == [("TfxBlockViews", "CPU:1"), ("TfxBlockViews", "CPU:2")]
    views = [o for o in graph.get_operations() if o.type == "TfxBlockViews"]
    assert all(len(o.inputs) == 1 and len(o.outputs) == 3 for o in views)
    for per_device, shape in zip(results, shapes):
        assert len(per_device) == len(DEVICES)
        for t in per_device:
            np.testing.assert_array_equal(t.numpy(), np.full(shape, 6.0))


def test_results_that_are_not_the_ops_outputs_go_out_through_one_identity_n_per_device():
    # An integer mean: the op sums, and the division makes new tensors.
    _, fused, graph = _batch_reduce(tfx_dist.FusedAllReduce(), [(4,), (3, 2)],
                                    dtype=tf.int32, reduce_op=tf.distribute.ReduceOp.MEAN)
    (op,) = fused
    assert not op.get_attr("Tblock")
    assert not [o for o in graph.get_operations() if o.type == "TfxBlockViews"]
    copies = [o for o in graph.get_operations() if o.type == "IdentityN"]
    assert sorted(o.device[-5:] for o in copies) == ["CPU:1", "CPU:2"]
