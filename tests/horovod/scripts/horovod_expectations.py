"""What Horovod 0.28.1's own tests expect of its TensorFlow API, on tfx_dist.horovod, every rank.

Each check is ``[got, expected]`` computed with numpy (or the error's class
name); every check runs even if an earlier one failed, and every rank runs
every collective in the same order. Written to ``RESULT_DIR/result-<rank>.json``.
Run by tests/horovod/test_horovod_expectations.py under ``tfx_dist.run -n 2``.
"""

import json
import os
import traceback

import keras
import numpy as np
import tensorflow as tf

import tfx_dist.horovod as hvd
import tfx_dist.horovod.keras as hvd_keras
from tfx_dist.comm import ops as comm_ops

hvd.init()
r, n = hvd.rank(), hvd.size()
checks = {}


def check(name, got, expected):
    """Records ``[got, expected]`` as JSON-ready lists (tensors, arrays and nests of them)."""
    checks[name] = tf.nest.map_structure(lambda v: np.asarray(v).tolist(), [got, expected])


def case(fn):
    """Runs one group of checks; an exception is recorded as a failed check, not a crash."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - reported to the test
        checks[fn.__name__ + "_raised"] = [f"{type(e).__name__}: {e}"[:500], "no error"]
        traceback.print_exc()
    return fn


def raises(name, error, call):
    try:
        call()
        check(name, "no error", error.__name__)
    except error:
        check(name, error.__name__, error.__name__)
    except Exception as e:  # noqa: BLE001
        check(name, type(e).__name__, error.__name__)


def grad_of(forward, x):
    """d sum(forward(x) * (rank + 1)) / dx: each rank weighs the output by its rank + 1."""
    x = tf.convert_to_tensor(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = forward(x)
        y = y[0] if isinstance(y, (tuple, list)) else y
        loss = tf.reduce_sum(y * float(r + 1))
    return tape.gradient(loss, x)


weights = [k + 1.0 for k in range(n)]  # every rank's weight in grad_of


@case
def zero_size_alltoall_then_more():
    check("alltoall_zero_columns", hvd.alltoall(tf.zeros([n, 0])).shape.as_list(), [n, 0])
    out, received = hvd.alltoall(tf.zeros([n, 0], tf.int32), splits=[1] * n)
    check("alltoall_zero_columns_splits", [out.shape.as_list(), received], [[n, 0], [1] * n])
    # A failed call (shapes differ between ranks) leaves the communicator usable.
    raises("mismatched_allreduce_raises", tf.errors.OpError,
           lambda: hvd.allreduce(tf.ones([r + 1]), op=hvd.Sum, name="mismatch"))
    check("allreduce_after_failures", hvd.allreduce(tf.ones([2]), op=hvd.Sum), [float(n)] * 2)


@case
def horovod_results():
    rng = np.random.RandomState(1234)  # the same tensor on every rank
    half = tf.constant(rng.uniform(-100, 100, [4096]).astype(np.float16))
    factor = float(rng.uniform())
    scaled = tf.cast(tf.cast(half, tf.float32) * tf.constant(factor, tf.float32), tf.float16)
    check("float16_prescale_in_float32",
          hvd.allreduce(half, op=hvd.Sum, prescale_factor=factor), scaled.numpy() * np.float16(n))
    summed = (half.numpy() * np.float16(n)).astype(np.float32)
    check("float16_postscale_in_float32", hvd.allreduce(half, op=hvd.Sum, postscale_factor=factor),
          (summed * np.float32(factor)).astype(np.float16))
    sparse = tf.IndexedSlices(tf.constant([[r + 1, 3]], tf.int32), tf.constant([r]), tf.constant([n, 2]))
    averaged = hvd.allreduce(sparse, op=hvd.Average)
    check("int_indexed_slices_average",
          [averaged.values.dtype.name, averaged.values, averaged.indices],
          ["float64", [[(k + 1) / n, 3 / n] for k in range(n)], list(range(n))])
    out = hvd.alltoall(tf.range(2 * n) + 10 * r)
    check("alltoall_without_splits_is_a_tensor", out,
          np.concatenate([np.arange(2 * n)[2 * r:2 * r + 2] + 10 * k for k in range(n)]))
    x = tf.constant(np.arange(2 * n * 3, dtype=np.float32).reshape(2 * n, 3))
    block = np.ones([2, 3], np.float32) * (r + 1)
    check("reducescatter_sum_gradient_is_horovods",  # the allgather of the gradients, times size
          grad_of(lambda t: hvd.reducescatter(t, op=hvd.Sum), x),
          np.concatenate([block * 0 + w for w in weights]) * n)
    check("reducescatter_average_gradient_is_horovods",
          grad_of(lambda t: hvd.reducescatter(t, op=hvd.Average), x),
          np.concatenate([block * 0 + w for w in weights]))


@case
def gradients():
    x = tf.ones([3]) * (r + 1)
    check("allreduce_sum_grad", grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), x), [sum(weights)] * 3)
    check("allreduce_average_grad", grad_of(lambda t: hvd.allreduce(t), x), [np.mean(weights)] * 3)
    check("allreduce_scaled_grad",
          grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3.0), x),
          [sum(weights) * 1.5] * 3)
    check("allreduce_grad_in_function",
          tf.function(lambda v: grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum), v))(x), [sum(weights)] * 3)

    a, b = tf.ones([2]), tf.ones([1, 2], tf.float64)
    with tf.GradientTape() as tape:
        tape.watch([a, b])
        ya, yb = hvd.grouped_allreduce([a, b], op=hvd.Sum)
        loss = tf.reduce_sum(ya) * (r + 1) + tf.cast(tf.reduce_sum(yb), tf.float32) * 2.0 * (r + 1)
    ga, gb = tape.gradient(loss, [a, b])
    check("grouped_allreduce_grad", [ga, gb], [[sum(weights)] * 2, [[2 * sum(weights)] * 2]])

    rows = tf.ones([r + 1, 2])  # rank k gathers k + 1 rows
    check("allgather_grad_is_horovods",  # this rank's rows of the average of the gradients
          grad_of(lambda t: hvd.allgather(t), rows), np.full([r + 1, 2], np.mean(weights)))
    check("comm_all_gather_grad",  # tfx_dist.comm.ops: the derivative, the sum
          grad_of(lambda t: comm_ops.all_gather(t, hvd.basics.communicator()), rows),
          np.full([r + 1, 2], sum(weights)))
    check("broadcast_grad_is_horovods", grad_of(lambda t: hvd.broadcast(t, 0), tf.ones([2])),
          [np.mean(weights) if r == 0 else 0.0] * 2)
    comm = hvd.basics.communicator()
    check("comm_broadcast_grad", grad_of(lambda t: comm_ops.broadcast([t], comm, root=1)[0], tf.ones([2])),
          [sum(weights) if r == 1 else 0.0] * 2)
    splits = [1, 2] if r == 0 else [2, 1]  # rank 0 sends 1 row to itself, 2 to rank 1
    sent = tf.ones([3, 2])
    expected = np.concatenate([np.full([s, 2], weights[j]) for j, s in enumerate(splits)])
    check("alltoall_grad", grad_of(lambda t: hvd.alltoall(t, splits=splits), sent), expected)


@case
def dtypes():
    for dtype in (tf.uint8, tf.int32):
        vals = tf.constant(sum([[k] * (r + 1) for k in range(n)], []), dtype)
        out, received = hvd.alltoall(vals, tf.constant([r + 1] * n, tf.int32))
        check(f"alltoall_{dtype.name}", [out, received], [[r] * sum(range(1, n + 1)), list(range(1, n + 1))])
        even = hvd.alltoall(tf.constant([k for k in range(n) for _ in range(2)], dtype))
        check(f"alltoall_{dtype.name}_even", tf.cast(even, tf.int32), [r] * 2 * n)


@case
def missing_calls():
    v = tf.Variable([float(r), 10.0 * r])
    w = tf.Variable(tf.ones([2, 2], tf.float64) * r)
    check("broadcast_inplace", [hvd.broadcast_([v], 1)[0], v], [[1.0, 10.0], [1.0, 10.0]])
    check("broadcast_inplace_several", [t for t in hvd.broadcast_([v, w], 0)] + [w],
          [[1.0, 10.0], np.zeros([2, 2]), np.zeros([2, 2])])  # v: rank 1's, from the call above
    gathered = hvd.grouped_allgather([tf.ones([r + 1]) * r, tf.constant([[r]])])
    check("grouped_allgather", gathered,
          [sum([[k] * (k + 1) for k in range(n)], []), [[k] for k in range(n)]])
    rows = tf.constant(np.arange(2 * n * 2, dtype=np.float32).reshape(2 * n, 2))
    mine = slice(2 * r, 2 * r + 2)
    check("grouped_reducescatter_scaled",
          hvd.grouped_reducescatter([rows, tf.cast(rows, tf.float64)], op=hvd.Sum, prescale_factor=0.5,
                                    postscale_factor=3.0),
          [rows.numpy()[mine] * n * 1.5] * 2)
    check("reducescatter_scaled",
          hvd.reducescatter(rows, op=hvd.Average, prescale_factor=2.0, postscale_factor=0.25),
          rows.numpy()[mine] * 0.5)
    raises("process_set_raises", NotImplementedError, lambda: hvd.ProcessSet([0]))
    raises("add_process_set_raises", NotImplementedError, lambda: hvd.add_process_set([0]))
    raises("broadcast_global_variables_raises", NotImplementedError,
           lambda: hvd.broadcast_global_variables(0))
    check("elastic_api", [callable(hvd.elastic.run), hasattr(hvd.elastic, "ObjectState")], [True, True])
    raises("adasum_raises", NotImplementedError, lambda: hvd.allreduce(tf.ones([1]), op=hvd.Adasum))
    check("global_process_set", hvd.allreduce(tf.ones([1]), op=hvd.Sum, process_set=hvd.global_process_set),
          [float(n)])


@case
def sync_batch_norm():
    rng = np.random.RandomState(7)
    every = rng.normal(size=[n, 4, 3]).astype(np.float32) * np.arange(1, n + 1)[:, None, None]
    sync = hvd.SyncBatchNormalization(momentum=0.5)
    plain_bn = keras.layers.BatchNormalization(momentum=0.5)
    x = tf.constant(every[r])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = sync(x, training=True)
        loss = tf.reduce_sum(out * tf.range(3, dtype=tf.float32) * (r + 1))
    grad = tape.gradient(loss, x)
    whole = tf.constant(every.reshape(-1, 3))
    with tf.GradientTape() as tape:
        tape.watch(whole)
        expected = plain_bn(whole, training=True)
        rank_weight = tf.repeat(tf.range(1, n + 1, dtype=tf.float32), 4)[:, None]
        expected_loss = tf.reduce_sum(expected * tf.range(3, dtype=tf.float32) * rank_weight)
    expected_grad = tape.gradient(expected_loss, whole)
    check("sync_batch_norm_output", out, expected.numpy()[4 * r:4 * r + 4])
    check("sync_batch_norm_moving_stats", [sync.moving_mean, sync.moving_variance],
          [plain_bn.moving_mean, plain_bn.moving_variance])
    check("sync_batch_norm_grad", grad, expected_grad.numpy()[4 * r:4 * r + 4])


@case
def partial_and_local():
    keras.utils.set_random_seed(3)
    shared, local = keras.layers.Dense(2), keras.layers.Dense(1)
    model = keras.Sequential([keras.Input([3]), shared, local])
    x = tf.ones([2, 3]) * (r + 1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    plain_grads = tape.gradient(loss, model.trainable_variables)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(model(x))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=[local])
    grads = tape.gradient(loss, model.trainable_variables)
    averaged = [hvd.allreduce(g) for g in plain_grads]
    check("partial_tape", grads, [averaged[0], averaged[1], plain_grads[2] / n, plain_grads[3] / n])

    v_shared, v_local = tf.Variable([0.0]), tf.Variable([0.0])
    opt = hvd_keras.DistributedOptimizer(keras.optimizers.SGD(1.0))
    opt.register_local_var(v_local)
    opt.apply([tf.constant([float(r + 1)])] * 2, [v_shared, v_local])
    check("register_local_var", [v_shared, v_local], [[-np.mean(weights)], [-(r + 1.0) / n]])
    opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=[local])
    before = [v.numpy() for v in model.trainable_variables]
    opt.apply(plain_grads, model.trainable_variables)
    check("partial_optimizer", [v - b for v, b in zip(model.trainable_variables, before)],
          [-averaged[0], -averaged[1], -plain_grads[2] / n, -plain_grads[3] / n])

    keep = tf.Variable([float(r)])
    everyone = keras.Sequential([keras.Input([1]), keras.layers.Dense(1)])
    everyone.layers[0].kernel.assign([[float(r)]])
    callback = hvd_keras.callbacks.BroadcastGlobalVariablesCallback(
        0, local_variables=[everyone.layers[0].bias])
    everyone.layers[0].bias.assign([float(r)])
    callback.set_model(everyone)
    callback.on_train_begin()
    check("broadcast_callback_local_variables", [everyone.layers[0].kernel, everyone.layers[0].bias, keep],
          [[[0.0]], [float(r)], [float(r)]])


@case
def error_kinds():
    raises("alltoall_indivisible_invalid_argument", tf.errors.InvalidArgumentError,
           lambda: hvd.alltoall(tf.zeros([n + 1])))
    sparse = tf.IndexedSlices(tf.ones([1, 2]), tf.constant([0]), tf.constant([2, 2]))
    raises("indexed_slices_prescale_not_implemented", NotImplementedError,
           lambda: hvd.allreduce(sparse, prescale_factor=2.0))
    raises("indexed_slices_postscale_not_implemented", NotImplementedError,
           lambda: hvd.allreduce(sparse, postscale_factor=2.0))


@case
def compat_v1_graph():
    with tf.Graph().as_default():
        summed = hvd.allreduce(tf.constant([1.0, 2.0]) * (r + 1), op=hvd.Sum)
        gathered = hvd.allgather(tf.constant([r]))
        x = tf.ones([2]) * (r + 1)
        grad = tf.gradients(hvd.broadcast(x, 0) * float(r + 1), x)[0]
        with tf.compat.v1.Session() as session:
            got = session.run([summed, gathered, grad])
    check("compat_v1_graph", got, [[sum(weights), 2 * sum(weights)], list(range(n)),
                                   [np.mean(weights) if r == 0 else 0.0] * 2])


check("allreduce_at_the_end", hvd.allreduce(tf.ones([1]), op=hvd.Sum), [float(n)])
hvd.shutdown()
with open(os.path.join(os.environ["RESULT_DIR"], f"result-{r}.json"), "w") as f:
    json.dump(checks, f)
