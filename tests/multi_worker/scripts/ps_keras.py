"""Worker script: a click model whose ShardedEmbedding tables live on parameter servers.

Environment: MODE=ps|reference (reference: one process, no strategy, local
tables, the same global batch), OPTIMIZER (a Keras optimizer class name),
OPTIMIZER_ARGS (JSON: its other keyword arguments), EVERY_ROW=1 (every global
batch names every row: a lazy sparse rule then equals Keras's dense one),
EPOCHS, PS_MODE (sync|async), DYNAMIC=1 (a dynamic table fed hashed ids),
BAD_ID=1 (first look up an id out of range and report the error), DIE_RANK
(that worker exits abruptly after its first epoch), LR, DENSE=servers|workers (where
the dense variables live), FULL=1 (fit with validation data, then evaluate and
a few steps of a custom loop with strategy.run, each worker feeding its half
of every global batch; a wider model). The tables start at zeros
and the dense layer from a fixed seed, so both modes start from the same
weights.
"""
import json
import os

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from worker_lib import report

MODE = os.environ.get("MODE", "ps")
EPOCHS = int(os.environ.get("EPOCHS", "2"))
DYNAMIC = os.environ.get("DYNAMIC") == "1"
ROWS, GLOBAL_BATCH = 40, 32

rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (256, 3)).astype("int64")
if os.environ.get("EVERY_ROW") == "1":  # 32 examples name rows 0-31 and 32-39
    ids[:, 0], ids[:, 1] = np.arange(256) % 32, 32 + np.arange(256) % 8
labels = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]
if DYNAMIC:  # hashed-feature ids: anywhere in int64, negative included
    ids = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)

FULL = os.environ.get("FULL") == "1"
strategy = (tfx_dist.ParameterServerStrategy(mode=os.environ.get("PS_MODE", "sync"),
                                             dense_variables=os.environ.get("DENSE", "workers"))
            if MODE == "ps" else tf.distribute.get_strategy())
rank = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
with strategy.scope():
    inputs = keras.Input((3,), dtype="int64")
    table = tfx_dist.layers.ShardedEmbedding(None if DYNAMIC else ROWS, 4, combiner="mean",
                                             embeddings_initializer="zeros", name="items")
    hidden = table(inputs)
    if FULL:  # a variable of several rows on the servers (1,200 floats), besides small ones
        hidden = keras.layers.Dense(300, activation="tanh", bias_initializer=keras.initializers.Constant(0.1),
                                    kernel_initializer=keras.initializers.GlorotUniform(seed=3))(hidden)
    outputs = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    optimizer = getattr(keras.optimizers, os.environ.get("OPTIMIZER", "Adagrad"))(
        float(os.environ.get("LR", "0.5")), **json.loads(os.environ.get("OPTIMIZER_ARGS", "{}")))
    model.compile(optimizer, "binary_crossentropy", metrics=["accuracy"])

bad_id_error = None
if os.environ.get("BAD_ID") == "1":
    try:
        table(np.array([[1, ROWS + 1000, 2]], dtype="int64"))
    except Exception as e:  # noqa: BLE001 - the test reads the message
        bad_id_error = f"{type(e).__name__}: {e}"


class DieAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        if str(rank) == os.environ.get("DIE_RANK"):
            os._exit(3)


history = model.fit(ids, labels, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                    callbacks=[DieAfterFirstEpoch()],
                    validation_data=(ids[:64], labels[:64]) if FULL else None)
extra = {}
if FULL:
    extra["val_loss"] = history.history["val_loss"]
    extra["evaluate"] = model.evaluate(ids[64:128], labels[64:128], batch_size=GLOBAL_BATCH, verbose=0)
    extra["fit_weights"] = [w.tolist() for w in model.get_weights()]
    num_workers = strategy.num_replicas_in_sync if MODE == "ps" else 1
    local = GLOBAL_BATCH // num_workers

    @tf.function
    def custom_step(x, y):
        def replica_step(x, y):
            with tf.GradientTape() as tape:
                per_example = keras.losses.binary_crossentropy(y, model(x, training=True))
                loss = tf.reduce_sum(per_example) / GLOBAL_BATCH
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
            return loss
        return strategy.run(replica_step, args=(x, y))

    for start in range(0, 4 * GLOBAL_BATCH, GLOBAL_BATCH):
        lo = start + (rank * local if MODE == "ps" else 0)
        custom_step(tf.constant(ids[lo:lo + local]), tf.constant(labels[lo:lo + local]))
    extra["loop_weights"] = [w.tolist() for w in model.get_weights()]
if MODE == "ps" and strategy.extended.dense_placement == "servers":
    extra["placement"] = {t.name: t.floats_per_server() for t in strategy.extended.dense_tables()}
every_id = np.unique(ids)[:, None].repeat(3, axis=1)
rows = table(every_id).numpy()  # mean of three copies of the row: the row itself
report({"loss": history.history["loss"], "rows": rows.tolist(),
        "dense": [w.tolist() for w in model.layers[-1].get_weights()],
        "predictions": model.predict(ids[:16], verbose=0).tolist(),
        "bad_id_error": bad_id_error, **extra})
