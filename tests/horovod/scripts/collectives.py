"""Every tfx_dist.horovod collective on every rank, with what numpy says it must return.

Prints ``RESULT {"check": [got, expected], ...}``; the test compares the pairs.
Runs under any launcher (TF_CONFIG, tfx-dist-run, horovodrun's variables).
"""

import json
import os
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import tfx_dist.horovod as hvd  # noqa: E402

hvd.init()
r, n = hvd.rank(), hvd.size()
checks = {}


def plain(value):
    """JSON-ready: tensors and arrays as nested lists."""
    if hasattr(value, "numpy"):
        value = value.numpy()
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, (np.ndarray, np.generic)):
        return value.tolist()
    return value


def check(name, got, expected):
    checks[name] = [plain(got), plain(expected)]


def per_rank(k, shape=(3,), dtype=np.float32):
    return (np.arange(np.prod(shape)).reshape(shape) + 10 * k + 1).astype(dtype)


all_values = np.stack([per_rank(k) for k in range(n)])
x = per_rank(r)
check("queries", [hvd.is_initialized(), hvd.size(), hvd.local_size(), hvd.cross_size(),
                  hvd.gloo_enabled(), hvd.mpi_enabled(), hvd.mpi_threads_supported()],
      [True, n, n, 1, True, False, False])
check("rank", hvd.rank(), int(os.environ.get("EXPECTED_RANK", r)))
check("local_rank", hvd.local_rank(), r)
for name, op, ref in [("average", hvd.Average, all_values.mean(0)), ("sum", hvd.Sum, all_values.sum(0)),
                      ("min", hvd.Min, all_values.min(0)), ("max", hvd.Max, all_values.max(0)),
                      ("product", hvd.Product, all_values.prod(0))]:
    check(f"allreduce_{name}", hvd.allreduce(tf.constant(x), op=op), ref)
    check(f"allreduce_{name}_int32", hvd.allreduce(tf.constant(x.astype(np.int32)), op=op),
          ref.astype(np.int32) if name != "average" else all_values.sum(0).astype(np.int32) // n)
check("allreduce_default_is_average", hvd.allreduce(tf.constant(x)), all_values.mean(0))
check("allreduce_average_false_is_sum", hvd.allreduce(tf.constant(x), average=False),
      all_values.sum(0))
check("allreduce_scaled", hvd.allreduce(tf.constant(x), op=hvd.Sum, prescale_factor=2.0,
                                        postscale_factor=0.25), all_values.sum(0) * 0.5)
fp16 = hvd.allreduce(tf.constant(x), op=hvd.Sum, compression=hvd.Compression.fp16)
check("allreduce_fp16_dtype", fp16.dtype.name, "float32")
check("allreduce_fp16", fp16, all_values.sum(0).astype(np.float16).astype(np.float32))
check("allreduce_bool_max", hvd.allreduce(tf.constant([r == 0, False]), op=hvd.Max), [True, False])
grouped = hvd.grouped_allreduce([tf.constant(x), tf.constant(x.astype(np.float64) * 2),
                                 tf.constant([r], tf.int64)], op=hvd.Sum)
check("grouped_allreduce", grouped,
      [all_values.sum(0).tolist(), (2 * all_values.sum(0)).tolist(), [sum(range(n))]])
# IndexedSlices are gathered (rows of every rank, indices kept), averaged by size.
slices = tf.IndexedSlices(tf.constant(per_rank(r, (2, 3))), tf.constant([r, r + 1], tf.int64),
                          tf.constant([n + 1, 3], tf.int64))
reduced = hvd.allreduce(slices)
check("allreduce_indexed_slices_values", reduced.values,
      np.concatenate([per_rank(k, (2, 3)) for k in range(n)]) / n)
check("allreduce_indexed_slices_indices", reduced.indices,
      np.concatenate([[k, k + 1] for k in range(n)]))
check("allreduce_indexed_slices_dense", tf.convert_to_tensor(reduced),
      sum(np.eye(n + 1, dtype=np.float32)[[k, k + 1]].T @ per_rank(k, (2, 3)) for k in range(n)) / n)
# Uneven allgather: rank k has k + 1 rows.
mine = per_rank(r, (r + 1, 2), np.int64)
check("allgather_uneven", hvd.allgather(tf.constant(mine)),
      np.concatenate([per_rank(k, (k + 1, 2), np.int64) for k in range(n)]))
check("allgather_uint16", hvd.allgather(tf.constant([r, r], tf.uint16)),
      np.repeat(np.arange(n), 2))
check("allgather_scalar", hvd.allgather(tf.constant(float(r))), np.arange(n, dtype=np.float32))
check("broadcast", hvd.broadcast(tf.constant(x), root_rank=n - 1), per_rank(n - 1))
check("broadcast_bool", hvd.broadcast(tf.constant([r == 0]), root_rank=0), [True])
v = tf.Variable(x)
kv = keras.Variable(x * 2)
hvd.broadcast_variables([v, kv], root_rank=1 % n)
check("broadcast_variables", [v.numpy().tolist(), keras.ops.convert_to_numpy(kv).tolist()],
      [per_rank(1 % n).tolist(), (2 * per_rank(1 % n)).tolist()])
check("broadcast_object", hvd.broadcast_object({"rank": r, "f": [1.5]}, root_rank=n - 1),
      {"rank": n - 1, "f": [1.5]})
check("allgather_object", hvd.allgather_object({"rank": r, "pad": "x" * r}),
      [{"rank": k, "pad": "x" * k} for k in range(n)])


@tf.function
def in_function(t):
    return (hvd.allreduce(t, op=hvd.Sum), hvd.allgather(t), hvd.broadcast(t, 0),
            hvd.allreduce(t, op=hvd.Product))


s, g, b, p = in_function(tf.constant(x))
check("function_allreduce", s, all_values.sum(0))
check("function_allgather", g, all_values.reshape(-1))
check("function_broadcast", b, per_rank(0))
check("function_product", p, all_values.prod(0))
check("function_second_call", in_function(tf.constant(x))[0], all_values.sum(0))


# Different orders on different ranks: names match them, as in Horovod. Each
# call blocks its thread until done, so the calls come from two threads; rank
# 0 issues "first" before "second", rank 1 the reverse.
results = {}


def issue(kind):
    if kind == "first":
        results[kind] = hvd.allreduce(tf.constant(x), op=hvd.Sum, name="first")
    else:
        results[kind] = hvd.allgather(tf.constant([r]), name="second")


order = ["first", "second"] if r % 2 == 0 else ["second", "first"]
threads = [threading.Thread(target=issue, args=(kind,)) for kind in order]
for thread in threads:
    thread.start()
    time.sleep(0.5)
for thread in threads:
    thread.join(120)
check("reordered_allreduce", results.get("first"), all_values.sum(0))
check("reordered_allgather", results.get("second"), np.arange(n))

# DistributedGradientTape: the gradient of w * (rank + 1) is rank + 1 here, its mean there.
w = tf.Variable([1.0, 1.0])
emb = tf.Variable(np.zeros((n + 1, 2), np.float32))
for sparse_as_dense in (False, True):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w * float(r + 1)) + tf.reduce_sum(tf.gather(emb, [r]) * float(r + 1))
    tape = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense)
    gw, gemb = tape.gradient(loss, [w, emb])
    check(f"tape_dense_{sparse_as_dense}", gw, [(n + 1) / 2] * 2)
    check(f"tape_sparse_type_{sparse_as_dense}", type(gemb).__name__,
          "EagerTensor" if sparse_as_dense and n > 1 else "IndexedSlices")
    check(f"tape_sparse_{sparse_as_dense}", tf.convert_to_tensor(gemb),
          [[(k + 1) / n] * 2 for k in range(n)] + [[0.0, 0.0]])

with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * float(r + 1))
tape = hvd.DistributedGradientTape(tape, gradient_predivide_factor=2.0,
                                   compression=hvd.Compression.fp16)
check("tape_predivide_fp16", tape.gradient(loss, [w])[0], [(n + 1) / 2] * 2)
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * float(r + 1))
check("tape_sum", hvd.DistributedGradientTape(tape, op=hvd.Sum).gradient(loss, w),
      [n * (n + 1) / 2] * 2)

# DistributedOptimizer: SGD(lr=1) on loss w * (rank + 1) moves w by the mean gradient.
for passes, average in ((1, False), (2, False), (2, True)):
    var = keras.Variable([0.0])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=passes,
                                   average_aggregated_gradients=average)

    @tf.function
    def step():
        opt.apply([tf.constant([float(r + 1)])], [var])

    for _ in range(passes):
        step()
    mean = (n + 1) / 2
    check(f"optimizer_passes{passes}_average{average}", keras.ops.convert_to_numpy(var),
          [-mean * (1 if average or passes == 1 else passes)])
check("optimizer_class", type(opt).__name__, "SGD")

# join: the rank that calls it last (after a sleep) is the answer on every rank.
if r == n - 1:
    time.sleep(0.5)
check("join_eager", hvd.join(), n - 1)
if r == 0:
    time.sleep(0.5)
check("join_in_function", tf.function(hvd.join)(), 0)

# alltoall with uneven splits (rank 0 sends 1 row to itself and 2 to rank 1;
# rank 1 sends 3 rows to rank 0 and none to itself), and reducescatter
# (3 rows: rank 0 gets 2, rank 1 gets 1); 2 processes here, 3 in test_horovod_alltoall.py.
mine = np.arange(3, dtype=np.float32) + 10 * r
out, got_splits = hvd.alltoall(tf.constant(mine), splits=[[1, 2], [3, 0]][r], name="a2a")
check("alltoall_uneven", [out, got_splits],
      [[[0.0, 10.0, 11.0, 12.0], [1, 3]], [[1.0, 2.0], [2, 0]]][r])
summed = hvd.reducescatter(tf.constant(np.arange(6, dtype=np.float32).reshape(3, 2) * (r + 1)),
                           op=hvd.Sum, name="rs")
check("reducescatter_sum", summed,
      (np.arange(6, dtype=np.float32).reshape(3, 2) * 3)[[[0, 1], [2]][r]])

for name, call in [("adasum", lambda: hvd.allreduce(tf.constant(x), op=hvd.Adasum))]:
    try:
        call()
        check(f"{name}_raises", "no error", "NotImplementedError")
    except NotImplementedError:
        check(f"{name}_raises", "NotImplementedError", "NotImplementedError")
hvd.shutdown()
check("shutdown", hvd.is_initialized(), False)
print("RESULT " + json.dumps(checks), flush=True)
if os.environ.get("RESULT_DIR"):  # launchers may interleave two ranks' long lines on one stdout
    with open(os.path.join(os.environ["RESULT_DIR"], f"result-{r}.json"), "w") as f:
        json.dump(checks, f)
