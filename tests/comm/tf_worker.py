"""One rank of the TensorFlow-op test (run by test_comm_tf_ops.py)."""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfx_dist.comm import Communicator, ops  # noqa: E402


def main():
    rank, addresses = int(sys.argv[2]), json.loads(sys.argv[3])
    size = len(addresses)
    comm = Communicator(rank, size, addresses, timeout_s=30)
    result = {"transport": comm.transport(1 - rank)}

    @tf.function
    def step(a, b, c):
        # Two independent collectives: TF may run them in any order on each rank.
        s = ops.all_reduce([a, b], comm, reduction="sum")
        m = ops.all_reduce([c], comm, reduction="mean")
        g = ops.all_gather(tf.reshape(a[: rank + 1], [-1, 1]), comm)
        bc = ops.broadcast([c], comm, root=size - 1)
        # A larger tensor (several shared-memory slots) beside the small ones.
        big = ops.all_reduce([tf.fill([100_000], tf.cast(rank, tf.float32))], comm, reduction="max")
        return s, m, g, bc, big

    for it in range(3):
        a = tf.constant(np.arange(6, dtype=np.float32) * (rank + 1) + it)
        b = tf.constant(np.full((2, 3), rank + 10, np.int32))
        c = tf.constant(np.full(5, float(rank), np.float64))
        s, m, g, bc, big = step(a, b, c)
        np.testing.assert_array_equal(big[0].numpy(), np.full(100_000, size - 1, np.float32))
        want_a = sum(np.arange(6, dtype=np.float32) * (r + 1) + it for r in range(size))
        np.testing.assert_allclose(s[0].numpy(), want_a)
        np.testing.assert_array_equal(s[1].numpy(), np.full((2, 3), sum(r + 10 for r in range(size))))
        assert s[1].dtype == tf.int32
        np.testing.assert_allclose(m[0].numpy(), np.full(5, np.mean(range(size))))
        want_g = np.concatenate([(np.arange(6, dtype=np.float32) * (r + 1) + it)[: r + 1]
                                 for r in range(size)]).reshape(-1, 1)
        np.testing.assert_allclose(g.numpy(), want_g)
        np.testing.assert_allclose(bc[0].numpy(), np.full(5, float(size - 1)))
    # Eager calls and a mismatch surfacing as a TF error on every rank.
    out = ops.all_reduce([tf.ones([3, 3])], comm, reduction="max")
    np.testing.assert_allclose(out[0].numpy(), np.ones([3, 3]))
    try:
        ops.all_reduce([tf.ones([rank + 2])], comm, name="mismatched")
        result["mismatch"] = None
    except tf.errors.FailedPreconditionError as e:
        result["mismatch"] = e.message
    # Latency of a 4 KiB all-reduce inside a tf.function.
    x = tf.ones([1024], tf.float32)
    f = tf.function(lambda t: ops.all_reduce([t], comm, name="lat")[0])
    for _ in range(50):
        f(x)
    import time
    t0 = time.perf_counter()
    for _ in range(300):
        f(x)
    result["latency_ms"] = (time.perf_counter() - t0) / 300 * 1e3
    comm.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
