"""One rank of the all-to-all / reduce-scatter test (run by test_comm_alltoall.py).

Every rank can compute every rank's input (seeded by rank), so each checks
its own result against numpy. Prints RESULT {...} or raises.
"""

import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tfx_dist.comm import CollectiveArgumentError, CollectiveMismatchError, Communicator, ops  # noqa: E402


def splits_of(r: int, size: int, call: int) -> np.ndarray:
    """Rank r's splits for call `call`: random in [0, 3], one forced zero."""
    s = np.random.default_rng(100 * call + r).integers(0, 4, size)
    s[(r + call) % size] = 0
    return s


def input_of(r: int, size: int, call: int, cols: int = 2) -> np.ndarray:
    rows = int(splits_of(r, size, call).sum())
    return (1000 * r + np.arange(rows * cols, dtype=np.float32)).reshape(rows, cols)


def expected_alltoall(me: int, size: int, call: int):
    parts, counts = [], []
    for src in range(size):
        s = splits_of(src, size, call)
        off = int(s[:me].sum())
        parts.append(input_of(src, size, call)[off:off + s[me]])
        counts.append(int(s[me]))
    return np.concatenate(parts), np.array(counts, np.int64)


def block(dim0: int, size: int, r: int) -> slice:
    """Horovod's reducescatter block of rank r."""
    base, extra = divmod(dim0, size)
    first = r * base + min(r, extra)
    return slice(first, first + base + (1 if r < extra else 0))


def main():
    rank, addresses = int(sys.argv[2]), json.loads(sys.argv[3])
    size = len(addresses)
    comm = Communicator(rank, size, addresses, timeout_s=30)
    result = {}

    # numpy API
    out, got = comm.alltoall_numpy(input_of(rank, size, 0), splits_of(rank, size, 0), name="np_a2a")
    want, want_counts = expected_alltoall(rank, size, 0)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(got, want_counts)
    x = np.stack([np.arange(7, dtype=np.float64) * (rank + 1)] * 2, axis=1)  # [7, 2]
    total = sum(np.stack([np.arange(7, dtype=np.float64) * (r + 1)] * 2, axis=1) for r in range(size))
    for reduction, want_full in (("sum", total), ("mean", total / size)):
        rs = comm.reducescatter_numpy(x, reduction=reduction)
        np.testing.assert_allclose(rs, want_full[block(7, size, rank)])
    rs = comm.reducescatter_numpy(np.full((size - 1, 3), rank, np.int32), reduction="max")  # dim0 < size
    assert rs.shape == ((1, 3) if rank < size - 1 else (0, 3)), rs.shape
    np.testing.assert_array_equal(rs, np.full(rs.shape, size - 1))
    try:
        comm.alltoall_numpy(np.ones((3, 2), np.float32), [1] * size + [1], name="bad_np")
        result["bad_splits_np"] = None
    except CollectiveArgumentError as e:
        result["bad_splits_np"] = str(e)

    # TF op, eager: splits from tf.math.bincount (int32)
    x0 = tf.constant(input_of(rank, size, 1))
    owner = np.repeat(np.arange(size), splits_of(rank, size, 1))
    splits = tf.math.bincount(tf.constant(owner, tf.int32), minlength=size, maxlength=size)
    out, got = ops.all_to_all(x0, splits, comm)
    want, want_counts = expected_alltoall(rank, size, 1)
    np.testing.assert_array_equal(out.numpy(), want)
    np.testing.assert_array_equal(got.numpy(), want_counts)
    assert got.dtype == tf.int64

    # tf.function with int64 splits computed in the graph, and its gradient:
    # loss = (rank + 1) * sum(received), so the rows this rank sent to j get
    # gradient j + 1.
    @tf.function
    def a2a_step(x, owner):
        s = tf.math.bincount(owner, minlength=size, maxlength=size, dtype=tf.int64)
        with tf.GradientTape() as tape:
            tape.watch(x)
            y, counts = ops.all_to_all(x, s, comm)
            loss = tf.reduce_sum(y) * float(rank + 1)
        return y, counts, tape.gradient(loss, x)

    for call in (2, 3):
        owner = np.repeat(np.arange(size), splits_of(rank, size, call)).astype(np.int64)
        y, counts, grad = a2a_step(tf.constant(input_of(rank, size, call)), tf.constant(owner))
        want, want_counts = expected_alltoall(rank, size, call)
        np.testing.assert_array_equal(y.numpy(), want)
        np.testing.assert_array_equal(counts.numpy(), want_counts)
        np.testing.assert_array_equal(grad.numpy(), np.repeat(owner + 1, 2).reshape(-1, 2).astype(np.float32))
    assert a2a_step.get_concrete_function(
        tf.TensorSpec([None, 2], tf.float32), tf.TensorSpec([None], tf.int64)).outputs[0].shape.as_list() == [None, 2]

    # reduce_scatter in tf.function with its gradient (all-gather of the
    # output's gradient): row i gets the weight of the rank owning its block.
    @tf.function
    def rs_step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = ops.reduce_scatter(x, comm, reduction="sum")
            loss = tf.reduce_sum(y) * float(rank + 1)
        return y, tape.gradient(loss, x)

    dim0 = 2 * size + 1
    x = np.arange(dim0 * 3, dtype=np.float32).reshape(dim0, 3) * (rank + 1)
    y, grad = rs_step(tf.constant(x))
    full = np.arange(dim0 * 3, dtype=np.float32).reshape(dim0, 3) * sum(r + 1 for r in range(size))
    np.testing.assert_allclose(y.numpy(), full[block(dim0, size, rank)])
    weights = np.concatenate([np.full(block(dim0, size, r).stop - block(dim0, size, r).start, r + 1.0)
                              for r in range(size)])
    np.testing.assert_allclose(grad.numpy(), np.repeat(weights, 3).reshape(dim0, 3))

    # Errors: different trailing dims on one rank (mismatch, every rank);
    # bad splits (this rank only, before negotiation).
    try:
        ops.all_to_all(tf.ones([size, 2 + (rank == 1)]), tf.ones([size], tf.int32), comm, name="mismatched")
        result["mismatch"] = None
    except tf.errors.FailedPreconditionError as e:
        result["mismatch"] = e.message
    try:
        ops.all_to_all(tf.ones([3, 2]), tf.constant([-1] + [1] * (size - 1)), comm, name="bad_tf")
        result["bad_splits_tf"] = None
    except tf.errors.InvalidArgumentError as e:
        result["bad_splits_tf"] = e.message
    try:
        comm.alltoall_numpy(np.ones((size, 2 + (rank == 1)), np.float32), [1] * size, name="mismatched_np")
        result["mismatch_np"] = None
    except CollectiveMismatchError as e:
        result["mismatch_np"] = str(e)
    # still usable after the errors
    out, _ = comm.alltoall_numpy(np.full((size, 1), rank, np.int64), [1] * size, name="after")
    np.testing.assert_array_equal(out[:, 0], np.arange(size))
    comm.close()
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
