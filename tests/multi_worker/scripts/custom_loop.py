"""Worker script: custom training loop, reduce, gather, sparse gradients, input sharding."""
import os

import numpy as np
import tensorflow as tf
import keras

from worker_lib import make_strategy, rank, regression_data, report

strategy = make_strategy()
me, n = rank(), strategy.extended._num_workers  # noqa: SLF001
out = {"num_replicas": strategy.num_replicas_in_sync,
       "transport": type(strategy.extended._transport).__name__,  # noqa: SLF001
       # TensorFlow's gRPC server would add /job:worker/... devices.
       "devices": [d.name for d in tf.config.list_logical_devices()]}

# -- strategy.run in a tf.function: dense Keras model + a sparse (IndexedSlices) table --
GLOBAL_BATCH = 32
x, y = regression_data(n=256)
ids = (np.arange(256) % 10).astype("int32")
keras.utils.set_random_seed(100 + me)  # different per worker: the chief's init must win
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
    table = tf.Variable(tf.random.normal([10, 1], seed=me), name="table")
    optimizer = keras.optimizers.SGD(0.05)
dataset = strategy.experimental_distribute_dataset(
    tf.data.Dataset.from_tensor_slices((x, y, ids)).batch(GLOBAL_BATCH))


@tf.function
def train_step(batch):
    def step_fn(xb, yb, ib):
        with tf.GradientTape() as tape:
            pred = model(xb, training=True) + tf.gather(table, ib)
            per_example = tf.reduce_mean(tf.square(pred - yb), axis=-1)
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=GLOBAL_BATCH)
        variables = model.trainable_variables + [table]
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        return loss
    per_replica_loss = strategy.run(step_fn, args=batch)
    return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None)


losses = []
for _ in range(2):
    for batch in dataset:
        losses.append(float(train_step(batch)))
out["losses"] = losses
out["weights"] = [w.tolist() for w in model.get_weights()] + [table.numpy().tolist()]

# -- reduce and gather of known values ---------------------------------------------------
values = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.fill([ctx.replica_id_in_sync_group + 1, 2],
                        float(ctx.replica_id_in_sync_group + 1)))
scalars = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
out["reduce_sum_scalar"] = float(strategy.reduce("SUM", scalars, axis=None))
out["reduce_mean_scalar"] = float(strategy.reduce("MEAN", scalars, axis=None))
out["reduce_mean_axis0"] = strategy.reduce("MEAN", values, axis=0).numpy().tolist()
out["reduce_nest"] = {k: float(v) for k, v in strategy.reduce(
    "SUM", {"a": scalars, "b": scalars}, axis=None).items()}
out["gather0"] = strategy.gather(values, axis=0).numpy().tolist()
out["gather1"] = strategy.gather(
    strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.fill([2, ctx.replica_id_in_sync_group + 1],
                            float(ctx.replica_id_in_sync_group))), axis=1).numpy().tolist()


@tf.function
def gather_in_function(v):
    return strategy.gather(v, axis=0)


out["gather_fn"] = gather_in_function(values).numpy().tolist()


# -- MEAN: the runtime divides by the job's replicas, as TensorFlow's / and // ------------
def mean_inputs(ctx):
    first = ctx.replica_id_in_sync_group == 0
    return {"f32": tf.constant([0.1, -2.5, 7.3] if first else [0.7, 1.1, -0.2], tf.float32),
            "f16": tf.constant([0.3, -1.7] if first else [1.9, 0.6], tf.float16),
            "i32": tf.constant([-3, 5, -1, 4] if first else [0, 0, -2, 1], tf.int32),  # odd sums < 0
            "i8": tf.constant([-3, 5] if first else [0, 0], tf.int8)}  # carried as int32


mean_values = strategy.experimental_distribute_values_from_function(mean_inputs)
mean_in_function = tf.function(lambda v: strategy.reduce("MEAN", v, axis=None))
out["mean_eager"] = {k: v.numpy().tolist()
                     for k, v in strategy.reduce("MEAN", mean_values, axis=None).items()}
out["mean_graph"] = {k: v.numpy().tolist() for k, v in mean_in_function(mean_values).items()}
mean_graph = mean_in_function.get_concrete_function(mean_values).graph
out["mean_ops"] = sorted([op.get_attr("reduction").decode(), op.get_attr("mean_divisor"), len(op.inputs)]
                         for op in mean_graph.get_operations() if op.type == "TfxAllReduce")
out["mean_divisions"] = sorted(op.type for op in mean_graph.get_operations()
                               if op.type in ("RealDiv", "FloorDiv", "Div", "TruncateDiv"))
from tfx_dist.comm import ops as comm_ops  # noqa: E402
try:  # ranks that disagree on the divisor: an error naming each view, on every rank
    comm_ops.all_reduce([tf.ones([2])], strategy.extended._transport.communicator,  # noqa: SLF001
                        reduction="mean", name="mean_mismatch", mean_divisor=2 + me)
    out["mean_mismatch"] = "no error"
except tf.errors.FailedPreconditionError as e:
    out["mean_mismatch"] = str(e)

# -- independent collectives in one graph: not chained, any order, right results ----------
@tf.function
def independent_collectives():
    ids = strategy.run(lambda: tf.cast(
        tf.distribute.get_replica_context().replica_id_in_sync_group + 1, tf.float32))
    return (strategy.reduce("SUM", ids, axis=None), strategy.reduce("MEAN", ids, axis=None),
            strategy.gather(strategy.run(lambda v: tf.reshape(v, [1]), args=(ids,)), axis=0))


graph = independent_collectives.get_concrete_function().graph
collectives = [op for op in graph.get_operations() if op.type.startswith("Tfx")]
out["independent_collectives"] = len(collectives)
out["chained_collectives"] = sum(1 for op in collectives for c in op.control_inputs
                                 if c.type.startswith("Tfx"))
total, mean, gathered = independent_collectives()
out["independent_results"] = [float(total), float(mean), gathered.numpy().tolist()]

# -- initial values of every dtype come from the chief -------------------------------------
with strategy.scope():
    odd = {name: tf.Variable(tf.cast(tf.fill([3], me + 1), dtype), name=name)
           for name, dtype in (("u32", tf.uint32), ("b", tf.bool), ("i8", tf.int8),
                               ("f16", tf.float16), ("i64", tf.int64))}
out["odd_dtypes"] = {k: np.asarray(v.numpy()).astype("float64").tolist() for k, v in odd.items()}
ints = strategy.experimental_distribute_values_from_function(
    lambda ctx: tf.constant([ctx.replica_id_in_sync_group + 1], tf.uint8))
out["reduce_uint8"] = strategy.reduce("SUM", ints, axis=None).numpy().tolist()

# -- input sharding: what each worker reads -----------------------------------------------
def local_elements(distributed):
    seen = []
    for element in distributed:
        for t in strategy.experimental_local_results(element):
            seen.extend(np.asarray(t).reshape(-1).tolist())
    return sorted(seen)


data_options = tf.data.Options()
data_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
out["data_shard"] = local_elements(strategy.experimental_distribute_dataset(
    tf.data.Dataset.range(64).batch(8).with_options(data_options)))


# -- how a worker with one CPU replica reads: directly, or through a multi-device iterator --
def reader_kind(distributed):
    iterator = iter(distributed)  # kept alive: once dropped, the reaper takes its reader
    return type(iterator._iterators[0]._iterator).__name__  # pylint: disable=protected-access


def per_replica_fn(ctx):
    return tf.data.Dataset.range(64).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(4)


shard_me = tf.data.Dataset.range(64).batch(8).with_options(data_options)
out["reader"] = reader_kind(strategy.experimental_distribute_dataset(shard_me))
out["reader_from_function"] = reader_kind(strategy.distribute_datasets_from_function(per_replica_fn))
out["from_function_elements"] = local_elements(strategy.distribute_datasets_from_function(per_replica_fn))
os.environ["TFX_DIRECT_INPUT"] = "off"
out["reader_off"] = reader_kind(strategy.experimental_distribute_dataset(shard_me))
out["data_shard_off"] = local_elements(strategy.experimental_distribute_dataset(shard_me))
out["from_function_elements_off"] = local_elements(
    strategy.distribute_datasets_from_function(per_replica_fn))
del os.environ["TFX_DIRECT_INPUT"]

files = []
workdir = os.environ["WORKDIR"]
for f in range(4):
    path = os.path.join(workdir, f"part-{f}.txt")
    with open(path, "w") as fh:
        fh.write("\n".join(str(f * 100 + i) for i in range(6)) + "\n")
    files.append(path)
file_options = tf.data.Options()
file_options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
file_ds = (tf.data.TextLineDataset(files).map(lambda s: tf.strings.to_number(s, tf.int64))
           .batch(4).with_options(file_options))
out["file_shard"] = local_elements(strategy.experimental_distribute_dataset(file_ds))


# -- the per-step "has data" all-reduce: skipped only where workers cannot run out first -----
def input_collectives(distributed):
    # A fresh tf.function each time: an iterator's type spec does not record whether it
    # checks, so one traced function would serve both kinds.
    next_of = tf.function(lambda iterator: next(iterator))
    graph = next_of.get_concrete_function(iter(distributed)).graph
    return sum(1 for op in graph.get_operations() if op.type.startswith("Tfx"))


def optional_collectives(distributed):
    next_of = tf.function(lambda iterator: iterator.get_next_as_optional().has_value())
    graph = next_of.get_concrete_function(iter(distributed)).graph
    return sum(1 for op in graph.get_operations() if op.type.startswith("Tfx"))


def optional_steps(distributed):
    """Sizes of the local batches until get_next_as_optional has no value."""
    iterator, sizes = iter(distributed), []
    while True:
        optional = iterator.get_next_as_optional()
        if not optional.has_value():
            return sizes
        sizes.append(sum(int(tf.size(t))
                         for t in strategy.experimental_local_results(optional.get_value())))


balanced = strategy.experimental_distribute_dataset(
    tf.data.Dataset.range(64).batch(8).with_options(data_options))
out["input_collectives_data"] = input_collectives(balanced)
out["optional_collectives_data"] = optional_collectives(balanced)
out["optional_steps_data"] = optional_steps(balanced)
# FILE sharding of 3 files: worker 0 reads 2 (12 lines: 6 batches of 2 per replica),
# worker 1 one (3 batches); both step 6 times, worker 1 getting empty batches at the end.
uneven = strategy.experimental_distribute_dataset(
    tf.data.TextLineDataset(files[:3]).map(lambda s: tf.strings.to_number(s, tf.int64))
    .batch(4).with_options(file_options))
out["input_collectives_file"] = input_collectives(uneven)
out["optional_collectives_file"] = optional_collectives(uneven)
out["optional_steps_file"] = optional_steps(uneven)
out["uneven_file_steps"] = [sum(int(tf.size(t)) for t in strategy.experimental_local_results(e))
                            for e in uneven]
report(out)
