"""FusedAllReduce on its own: packs, where results live, agreement with TensorFlow's."""

import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from tfx_dist.cross_device_ops import MAX_PACKS, MIN_PACK_BYTES, split_into_packs

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


def _per_replica(shapes):
    """PerReplica values: device d holds tensors filled with d + 1."""
    from tensorflow.python.distribute import values as values_lib

    out = []
    for shape in shapes:
        parts = []
        for d, device in enumerate(DEVICES):
            with tf.device(device):
                parts.append(tf.fill(shape, float(d + 1)))
        out.append(values_lib.PerReplica(parts))
    return out


def _batch_reduce(ops, shapes, options=None):
    @tf.function
    def step():
        values = _per_replica(shapes)
        reduced = ops.batch_reduce(tf.distribute.ReduceOp.SUM, [(v, v) for v in values],
                                   options=options)
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
    assert sum(len(op.outputs) for op in fused) == len(SHAPES)
    for mine, tfs in zip(ours, theirs):
        assert len(mine) == len(DEVICES)
        for a, b in zip(mine, tfs):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            np.testing.assert_array_equal(a.numpy(), np.full(a.shape, 6.0))


def test_bytes_per_pack_sets_the_pack_size():
    options = tf.distribute.experimental.CommunicationOptions(bytes_per_pack=1 << 30)
    _, fused, _ = _batch_reduce(tfx_dist.FusedAllReduce(), SHAPES, options)
    assert len(fused) == 1


def test_reducing_device_keeps_the_results_and_each_other_device_copies_them_in_one_op():
    _, fused, graph = _batch_reduce(tfx_dist.FusedAllReduce(), [(4,), (3, 2), (5,)])
    (op,) = fused
    assert "CPU:0" in op.device
    copies = [o for o in graph.get_operations()
              if o.type in ("Identity", "IdentityN") and o.device and o.inputs[0].op is op]
    assert sorted((o.type, o.device[-5:]) for o in copies) == [("IdentityN", "CPU:1"),
                                                                ("IdentityN", "CPU:2")]
    assert all(len(o.inputs) == 3 for o in copies)
