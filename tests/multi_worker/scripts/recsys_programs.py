"""Worker script: recommender programs as users write them, under one multi-worker strategy.

Environment: STRATEGY=ps|hybrid|mwms (ps: tfx_dist.ParameterServerStrategy, the
job has ps tasks). Every strategy runs the NumPy-input check (each example
exactly once per epoch across the workers, with Keras's default
``shuffle=True``, with ``shuffle="batch"`` and without shuffling). Under ps the
script also trains what Keras users feed a recommender (string features
through StringLookup and Hashing, ragged multi-hot ids, a global batch that
does not divide by the workers, a subclassed model with a server table), and
checks the saving story. It reports one dict; the test compares the workers'.
"""
import json
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from worker_lib import report

STRATEGY = os.environ.get("STRATEGY", "ps")
WORKDIR = os.environ["WORKDIR"]
rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
if STRATEGY == "ps":  # as a program written for TensorFlow's strategy creates it
    strategy = tfx_dist.ParameterServerStrategy(
        variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner(
            min_shard_bytes=1024, max_shards=2))
else:
    strategy = {"hybrid": tfx_dist.HybridStrategy,
                "mwms": tfx_dist.MultiWorkerMirroredStrategy}[STRATEGY]()
result = {}


def error_of(call):
    """What ``call()`` raised (class and message), or None."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the test reads the class and message
        return f"{type(e).__name__}: {e}"
    return None


# -- NumPy input: every example once per epoch across the workers -------------------------------

seen = []


class Recorder(keras.layers.Layer):
    """Records the example numbers this worker trains on (its input is the example's number)."""

    def call(self, x):
        record = tf.py_function(lambda v: seen.extend(v.numpy().ravel().astype(int).tolist()) or 0,
                                [x], tf.int32)
        with tf.control_dependencies([record]):
            return tf.identity(x)


class EpochEnd(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(list(seen))
        seen.clear()


numbers = np.arange(64, dtype="float32")[:, None]
with strategy.scope():
    inputs = keras.Input((1,))
    counter = keras.Model(inputs, keras.layers.Dense(1)(Recorder()(inputs)))
    counter.compile("sgd", "mse")
for shuffle, epochs in ((True, 2), ("batch", 1), (False, 1)):
    epoch_end = EpochEnd()
    counter.fit(numbers, np.zeros_like(numbers), batch_size=16, epochs=epochs, shuffle=shuffle,
                callbacks=[epoch_end], verbose=0)
    result[f"seen_shuffle_{shuffle}"] = epoch_end.epochs


# -- saving as the README says (mwms) ----------------------------------------------------------------


if STRATEGY == "mwms":
    from tfx_dist.checkpointing import write_filepath

    # write_filepath creates the folder it names (the chief's, or this worker's temporary one).
    counter.save_weights(write_filepath(os.path.join(WORKDIR, "new", "deep", "a.weights.h5")))
    # One path on every worker: the chief writes it, the others do not collide with it.
    same = os.path.join(WORKDIR, "same")
    os.makedirs(same, exist_ok=True)
    counter.save_weights(os.path.join(same, "b.weights.h5"))
    counter.save(os.path.join(same, "b.keras"))
    result["same_path_files"] = sorted(os.listdir(same))
    loaded = keras.models.load_model(os.path.join(same, "b.keras"), custom_objects={"Recorder": Recorder})
    result["same_path_loads"] = all(np.array_equal(a, b) for a, b in
                                    zip(loaded.get_weights(), counter.get_weights()))
    # A save that fails on one worker fails on every worker; the next save still pairs.
    bad = os.path.join(WORKDIR, "a_file")
    open(bad, "w").close()
    checkpoint = tf.train.Checkpoint(model=counter)
    result["failed_save"] = error_of(lambda: checkpoint.write(
        os.path.join(bad if rank == 1 else WORKDIR, "ckpt", "c")))
    result["next_save"] = error_of(lambda: counter.save_weights(os.path.join(same, "c.weights.h5")))
    # Different saves at the same point: an error on both.
    result["mismatched_save"] = error_of(
        lambda: (checkpoint.write(os.path.join(WORKDIR, "ckpt2", "d")) if rank == 0
                 else counter.save_weights(os.path.join(same, "d.weights.h5"))))
    report(result)
    # Horovod's habit: the chief alone saves at the end; every process must exit 0.
    if rank == 0:
        counter.save(os.path.join(WORKDIR, "chief_only.keras"))
    raise SystemExit(0)

if STRATEGY == "hybrid":  # workers whose inputs differ: an error within seconds, no timeout
    import time

    start = time.monotonic()
    rows = 64 if rank == 0 else 32  # per-worker data of different lengths
    result["uneven_predict"] = error_of(
        lambda: counter.predict(numbers[:rows], batch_size=16, verbose=0))
    calls = []

    def fail_on_worker_1(x):
        calls.append(1)
        if rank == 1 and len(calls) == 3:
            raise ValueError("a bad record in worker 1's batch")
        return x

    class Checked(keras.layers.Layer):
        def call(self, x):
            return tf.reshape(tf.py_function(fail_on_worker_1, [x], tf.float32), tf.shape(x))

    with strategy.scope():
        checked = keras.Sequential([keras.Input((1,)), Checked(), keras.layers.Dense(1)])
        checked.compile("sgd", "mse")
    result["failed_step"] = error_of(lambda: checked.fit(numbers, numbers, batch_size=16, verbose=0))
    result["after_failed_step"] = error_of(strategy.barrier)  # the program caught it, goes on
    result["uneven_seconds"] = time.monotonic() - start

if STRATEGY != "ps":
    report(result)
    raise SystemExit(0)

# -- what Keras users feed a recommender -----------------------------------------------------------

VOCAB = [f"item{i}" for i in range(20)]
rs = np.random.RandomState(0)
n = 99  # 3 global batches of 33: the workers get 17 and 16 rows
item_names = np.array([VOCAB[i] for i in rs.randint(0, 20, n)])
cities = np.array([f"city{i}" for i in rs.randint(0, 50, n)])
lengths = rs.randint(1, 5, n)
tags = tf.RaggedTensor.from_row_lengths(rs.randint(0, 30, lengths.sum()).astype("int64"), lengths)
labels = (np.array([int(s[4:]) for s in item_names]) % 2).astype("float32")[:, None]
features = {"item": item_names[:, None], "city": cities[:, None], "tags": tags}
dataset = tf.data.Dataset.from_tensor_slices((features, labels)).batch(33)


def recommender():
    """String features through StringLookup and Hashing, ragged multi-hot ids, three tables."""
    inputs = {"item": keras.Input((1,), dtype="string", name="item"),
              "city": keras.Input((1,), dtype="string", name="city"),
              "tags": keras.Input((None,), dtype="int64", ragged=True, name="tags")}
    item_ids = keras.layers.StringLookup(vocabulary=VOCAB)(inputs["item"])
    city_ids = keras.layers.Hashing(num_bins=16)(inputs["city"])
    tables = [tfx_dist.layers.ShardedEmbedding(21, 4, combiner="sum", name="item_table",
                                               embeddings_initializer="zeros")(item_ids),
              tfx_dist.layers.ShardedEmbedding(16, 2, combiner="sum", name="city_table",
                                               embeddings_initializer="zeros")(city_ids),
              tfx_dist.layers.ShardedEmbedding(30, 3, combiner="mean", name="tag_table",
                                               embeddings_initializer="zeros")(inputs["tags"])]
    output = keras.layers.Dense(1, activation="sigmoid",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=1))(
        keras.layers.Concatenate()(tables))
    model = keras.Model(inputs, output)
    model.compile(keras.optimizers.Adagrad(0.5), "binary_crossentropy")
    return model


with strategy.scope():
    model = recommender()
history = model.fit(dataset, epochs=3, verbose=0)
result["features_loss"] = history.history["loss"]
result["features_weights"] = [np.asarray(w).tolist() for w in model.layers[-1].get_weights()]
# The same program in this process with no strategy (local tables), for reference.
history = recommender().fit(dataset, epochs=3, verbose=0)
result["features_reference_loss"] = history.history["loss"]


class TwoTower(keras.Model):
    """A subclassed model with a table on the servers: fit builds it (no call by hand). The
    table takes keras.layers.Embedding's arguments: he_normal, a regularizer, mask_zero."""

    def __init__(self):
        super().__init__()
        self.table = tfx_dist.layers.ShardedEmbedding(
            40, 4, combiner="mean", embeddings_initializer="he_normal", mask_zero=True,
            embeddings_regularizer=keras.regularizers.L2(1e-3))
        self.head = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=2))

    def call(self, ids):
        return self.head(self.table(ids))


ids = rs.randint(0, 40, (64, 3)).astype("int64")
with strategy.scope():
    subclassed = TwoTower()
    subclassed.compile(keras.optimizers.Adagrad(0.5), "mse")
history = subclassed.fit(ids, (ids[:, :1] % 3).astype("float32"), batch_size=16, epochs=3, verbose=0)
result["subclassed_loss"] = history.history["loss"]
result["he_normal_std"] = float(np.std(subclassed.table(np.arange(1, 40)[:, None]).numpy()))

# A plain keras.layers.Embedding that TensorFlow's partitioner splits: a table on the servers,
# trained, saved and served as the same model with ShardedEmbedding, and as one process.
plain_x = rs.randint(0, 100, (64, 2)).astype("int64")
plain_y = ((plain_x[:, :1] % 5) / 4.0).astype("float32")


def items_model(embedding_class, small_class=keras.layers.Embedding):
    ids = keras.Input((2,), dtype="int64")
    items = embedding_class(100, 8, embeddings_initializer="zeros", name="items")(ids)  # 2 shards
    colors = small_class(10, 4, embeddings_initializer="zeros", name="colors")(ids % 10)  # 1 shard
    x = keras.layers.Concatenate()([keras.layers.Flatten()(items), keras.layers.Flatten()(colors)])
    model = keras.Model(ids, keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(
        seed=3))(x))
    model.compile(keras.optimizers.Adagrad(0.3), "mse")
    return model


with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    with strategy.scope():
        partitioned = items_model(keras.layers.Embedding)
        sharded = items_model(tfx_dist.layers.ShardedEmbedding)
result["plain_embedding_warnings"] = [str(w.message) for w in caught
                                      if "keras.layers.Embedding" in str(w.message)]
items, colors = partitioned.get_layer("items"), partitioned.get_layer("colors")
result["partitioned_kinds"] = [isinstance(items, keras.layers.Embedding),
                               isinstance(items, tfx_dist.layers.ShardedEmbedding),
                               items.table.placement.value, type(colors).__name__,
                               [w.path for w in colors.weights]]
fit = dict(batch_size=16, epochs=3, shuffle=False, verbose=0)
result["partitioned_loss"] = partitioned.fit(plain_x, plain_y, **fit).history["loss"]
result["sharded_loss"] = sharded.fit(plain_x, plain_y, **fit).history["loss"]
result["one_process_loss"] = items_model(keras.layers.Embedding).fit(plain_x, plain_y, **fit).history["loss"]
probe = plain_x[:8]
result["partitioned_predictions"] = partitioned.predict(probe, verbose=0).tolist()
result["sharded_predictions"] = sharded.predict(probe, verbose=0).tolist()
# Saved as a ShardedEmbedding: the file loads in a plain process's way (no strategy).
keras_path = os.path.join(WORKDIR, "partitioned.keras")
partitioned.save(keras_path)
loaded = keras.models.load_model(keras_path)
result["loaded_kind"] = type(loaded.get_layer("items")).__name__
result["loaded_predictions"] = loaded.predict(probe, verbose=0).tolist()
served = tfx_dist.serving.to_plain_model(partitioned)
result["served_predictions"] = served.predict(probe, verbose=0).tolist()
report(result)
