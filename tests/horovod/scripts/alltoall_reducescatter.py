"""hvd.alltoall and hvd.reducescatter on every rank, with what numpy says they must return.

Reports ``{"check": [got, expected], ...}`` (workers.report); uneven splits, zero
splits, no splits, tf.function, int32 and bool, Average and Sum, uneven blocks.
Then hvd.start_timeline / stop_timeline (the test sets HOROVOD_TIMELINE).
"""

import os

import numpy as np
import tensorflow as tf

import tfx_dist.horovod as hvd
import workers

hvd.init()
r, n = hvd.rank(), hvd.size()
checks = {}


def check(name, got, expected):
    got = [g.numpy().tolist() if hasattr(g, "numpy") else g for g in got]
    checks[name] = [got, [np.asarray(e).tolist() for e in expected]]


def splits_of(rank):
    return [(rank + j) % n for j in range(n)]  # uneven, one zero per rank


def rows_of(rank):
    count = sum(splits_of(rank))
    base = 100 * rank + np.arange(count)
    return np.stack([base, -base], axis=1).astype(np.float32)


def expected_alltoall():
    parts, received = [], []
    for j in range(n):
        start = sum(splits_of(j)[:r])
        parts.append(rows_of(j)[start:start + splits_of(j)[r]])
        received.append(splits_of(j)[r])
    return np.concatenate(parts), np.array(received, np.int32)


out, received = hvd.alltoall(tf.constant(rows_of(r)), splits=splits_of(r), name="a2a_uneven")
check("alltoall_uneven", [out, received], expected_alltoall())
assert received.dtype == tf.int32

even = np.arange(2 * n, dtype=np.int32) + 10 * r
out = hvd.alltoall(tf.constant(even), name="a2a_even")  # no splits: the tensor alone (Horovod >= 0.22)
check("alltoall_no_splits", [out],
      [np.concatenate([np.arange(2 * n, dtype=np.int32)[2 * r:2 * r + 2] + 10 * j for j in range(n)])])


@tf.function
def routed(x):
    splits = tf.constant(splits_of(r), tf.int64)  # computed in the graph
    return hvd.alltoall(x, splits=splits)


out, received = routed(tf.constant(rows_of(r)))
check("alltoall_in_function", [out, received], expected_alltoall())

flags = tf.constant(rows_of(r)[:, 0] % 2 == 0)
out, _ = hvd.alltoall(flags, splits=splits_of(r), name="a2a_bool")
check("alltoall_bool", [out], [expected_alltoall()[0][:, 0] % 2 == 0])

try:
    hvd.alltoall(tf.zeros([n + 1]), name="a2a_bad")
    check("alltoall_indivisible_raises", ["no error"], ["InvalidArgumentError"])
except tf.errors.InvalidArgumentError:
    check("alltoall_indivisible_raises", ["InvalidArgumentError"], ["InvalidArgumentError"])

# reducescatter: 2n+1 rows, so the first rank gets one more (Horovod's blocks).
rows = 2 * n + 1
mine = (np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)) * (r + 1)
total = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) * sum(range(1, n + 1))
counts = [rows // n + (k < rows % n) for k in range(n)]
block = slice(sum(counts[:r]), sum(counts[:r + 1]))
check("reducescatter_sum", [hvd.reducescatter(tf.constant(mine), op=hvd.Sum, name="rs_sum")],
      [total[block]])
check("reducescatter_average", [hvd.reducescatter(tf.constant(mine), name="rs_avg")],
      [total[block] / n])
ints = np.arange(rows, dtype=np.int64) * (r + 1)
check("reducescatter_int64_in_function",
      [tf.function(lambda t: hvd.reducescatter(t, op=hvd.Sum))(tf.constant(ints))],
      [(np.arange(rows) * sum(range(1, n + 1)))[block]])
try:
    hvd.reducescatter(tf.constant(mine), op=hvd.Max)
    check("reducescatter_max_raises", ["no error"], ["NotImplementedError"])
except NotImplementedError:
    check("reducescatter_max_raises", ["NotImplementedError"], ["NotImplementedError"])

# The timeline (HOROVOD_TIMELINE) was on for all of the above; now restart it
# into another file around a collective in a tf.function.
second = hvd.start_timeline(os.path.join(os.environ["WORKDIR"], "second.json"))
tf.function(lambda v: hvd.allreduce(v, name="in_function"))(tf.ones([16]))
hvd.stop_timeline()
hvd.shutdown()
workers.report({"checks": checks, "second": second})
