"""Summing a click-through batch's position gradients per distinct id, three ways.

One worker's batch of `ps_ctr.py` (2048 examples x 26 Zipf features: 53,248
positions of 64 floats, about 19,300 distinct ids): the sum that
`ShardedEmbedding`'s backward pass runs every step, by TensorFlow's
``scatter_nd``, by its ``unsorted_segment_sum`` and by tfx_dist's
``TfxSumRowsByIndex`` (what the layer uses on CPU), each in a `tf.function`,
interleaved; p50 of the calls. Also the forward expansion (``tf.gather``) and
``tf.unique`` of the same batch, for scale.

    PYTHONPATH=. python3 benchmarks/row_sum.py [--calls 60]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import common  # noqa: E402
import ps_ctr  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    args = parser.parse_args()
    import numpy as np
    import tensorflow as tf

    from tfx_dist import _ops

    ids, _, per_worker = ps_ctr._data(1_000_000, 1, 0, 2)
    flat = tf.constant(ids[:per_worker].reshape(-1))
    unique, position = tf.unique(flat)
    count = tf.size(unique)
    grads = tf.random.normal([int(flat.shape[0]), ps_ctr.DIM])
    rows = tf.random.normal([int(count), ps_ctr.DIM])
    lib = _ops.load_op_library("_ps_ops")
    calls = {
        "tf.scatter_nd": tf.function(lambda: tf.scatter_nd(
            position[:, None], grads, tf.stack([count, ps_ctr.DIM]))),
        "tf.math.unsorted_segment_sum": tf.function(lambda: tf.math.unsorted_segment_sum(
            grads, position, count)),
        "TfxSumRowsByIndex (tfx_dist)": tf.function(lambda: lib.tfx_sum_rows_by_index(
            grads, position, count)),
        "forward: tf.gather (distinct rows to positions)": tf.function(lambda: tf.gather(rows, position)),
        "forward: tf.unique": tf.function(lambda: tf.unique(flat)),
    }
    want = tf.math.unsorted_segment_sum(grads, position, count).numpy()
    np.testing.assert_allclose(calls["TfxSumRowsByIndex (tfx_dist)"]().numpy(), want, rtol=1e-4, atol=1e-4)
    times = common.interleave(calls, rounds=args.calls)
    machine = common.machine_info()
    print(f"{flat.shape[0]:,} positions x {ps_ctr.DIM} floats, {int(count):,} distinct ids; "
          f"{args.calls} calls each, interleaved ({machine['date']}, load {machine['loadavg_1m']:.1f})")
    for name, ts in times.items():
        print(f"  {name:50s} p50 {1e3 * common.median(ts):6.2f} ms")


if __name__ == "__main__":
    main()
