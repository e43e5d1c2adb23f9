"""Worker script: a click model under tfx_dist.HybridStrategy, every way Keras drives it.

Two sharded tables ("items", multi-hot, and "users", of another width: rows
spread over the workers, their all-to-alls fused), a replicated one
("colors"), dense features and an MLP. The script runs `fit` (validation data
and a callback), `evaluate`, a custom loop (`strategy.run` in `tf.function`)
and `predict`, then reports every number the test compares.

Environment: MODE=hybrid|reference (reference: one process, no strategy,
the same global batches), CKPT=<folder>: after training, save a
`tf.train.Checkpoint` there (every worker); MODE=restore: build the model
under HybridStrategy, restore CKPT and report the table's rows. OPTIMIZER,
LR, OPTIMIZER_ARGS (JSON): the model's optimizer (Adagrad(0.3) by default).
The tables start at zeros, the dense layers from fixed seeds, so every mode
starts from the same weights. Adagrad: lazy sparse updates equal dense ones.
"""
import json
import os

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from worker_lib import report

MODE = os.environ.get("MODE", "hybrid")
CKPT = os.environ.get("CKPT")
# "sharded" to restore a checkpoint of parameter servers, which number every table (a
# table's id is part of its rows' identity in the files).
COLOR_PLACEMENT = os.environ.get("COLOR_PLACEMENT", "replicated")
ROWS, USERS, COLORS, GLOBAL_BATCH = 40, 30, 5, 32

rs = np.random.RandomState(0)
items = rs.randint(0, ROWS, (256, 3)).astype("int64")
colors = rs.randint(0, COLORS, (256, 1)).astype("int64")
users = rs.randint(0, USERS, (256, 1)).astype("int64")
dense = rs.normal(size=(256, 2)).astype("float32")
labels = (((items[:, 0] % 2) == 0) ^ (dense[:, 0] > 1.0)).astype("float32")[:, None]
x = {"items": items, "colors": colors, "users": users, "dense_features": dense}

strategy = tfx_dist.HybridStrategy() if MODE != "reference" else tf.distribute.get_strategy()
with strategy.scope():
    inputs = {"items": keras.Input((3,), dtype="int64", name="items"),
              "colors": keras.Input((1,), dtype="int64", name="colors"),
              "users": keras.Input((1,), dtype="int64", name="users"),
              "dense_features": keras.Input((2,), name="dense_features")}
    item_table = tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", placement="sharded",
                                                  embeddings_initializer="zeros", name="item_table")
    user_table = tfx_dist.layers.ShardedEmbedding(USERS, 3, combiner="sum", placement="sharded",
                                                  embeddings_initializer="zeros", name="user_table")
    # Zeros too: with ps tasks this table lives on the servers, whose random
    # initial rows follow the initializer's distribution, not Keras's values.
    color_table = tfx_dist.layers.ShardedEmbedding(
        COLORS, 2, combiner="sum", placement=COLOR_PLACEMENT, name="color_table",
        embeddings_initializer="zeros")
    hidden = keras.layers.Concatenate()([item_table(inputs["items"]), color_table(inputs["colors"]),
                                         user_table(inputs["users"]), inputs["dense_features"]])
    hidden = keras.layers.Dense(8, activation="relu",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=5))(hidden)
    outputs = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    optimizer = getattr(keras.optimizers, os.environ.get("OPTIMIZER", "Adagrad"))(
        float(os.environ.get("LR", "0.3")), **json.loads(os.environ.get("OPTIMIZER_ARGS", "{}")))
    model.compile(optimizer, "binary_crossentropy", metrics=["accuracy"])
every_id = np.arange(ROWS)[:, None].repeat(3, axis=1)  # mean of three copies of a row: the row
every_user = np.arange(USERS)[:, None]

if MODE == "restore":
    tf.train.Checkpoint(model=model).read(os.path.join(CKPT, "ckpt")).expect_partial()
    report({"rows": item_table(every_id).numpy().tolist(),
            "user_rows": user_table(every_user).numpy().tolist(),
            "table_kind": type(item_table.table).__name__,
            "color_kind": type(color_table.table).__name__})
    raise SystemExit(0)


class CountEpochs(keras.callbacks.Callback):
    epochs = 0

    def on_epoch_end(self, epoch, logs=None):
        CountEpochs.epochs += 1


train = {k: v[:192] for k, v in x.items()}
val = ({k: v[192:] for k, v in x.items()}, labels[192:])
history = model.fit(train, labels[:192], batch_size=GLOBAL_BATCH, epochs=2, shuffle=False,
                    verbose=0, validation_data=val, callbacks=[CountEpochs()])
evaluation = model.evaluate(*val, batch_size=GLOBAL_BATCH, verbose=0)

# A custom loop over the same data: strategy.run inside tf.function.
loss_fn = keras.losses.BinaryCrossentropy(reduction="sum")
dataset = tf.data.Dataset.from_tensor_slices((train, labels[:192])).batch(GLOBAL_BATCH)
distributed = strategy.experimental_distribute_dataset(dataset)


@tf.function
def custom_step(batch):
    def replica_step(features, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(features, training=True)) / GLOBAL_BATCH
        grads = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    per_replica = strategy.run(replica_step, args=batch)
    return strategy.reduce("SUM", per_replica, axis=None)


communicator = getattr(getattr(strategy.extended, "_transport", None), "communicator", None)
before = communicator.stats() if communicator is not None else None
custom_losses = [float(custom_step(batch)) for batch in distributed]
# Collectives other than all-reduce buckets in the custom loop: the all-to-alls' exchanges.
exchanges = None
if communicator is not None:
    after = communicator.stats()
    exchanges = ((after["collectives"] - after["allreduce_buckets"])
                 - (before["collectives"] - before["allreduce_buckets"]))


def alltoall_ops(function):
    """(all-to-all ops, those exempt from tf.function's chain of stateful ops) of its graphs:
    exempt ones may reach the runtime together and be fused."""
    ops = [op for f in function._list_all_concrete_functions()  # pylint: disable=protected-access
           for op in f.graph.get_operations() if op.type == "TfxAllToAll"]
    free = [op for op in ops if op.node_def.attr["_independent_side_effects"].b]
    return len(ops), len(free)


if CKPT:
    from tfx_dist.checkpointing import write_filepath

    tf.train.Checkpoint(model=model).write(write_filepath(os.path.join(CKPT, "ckpt"), strategy))

report({"loss": history.history["loss"], "val_loss": history.history["val_loss"],
        "epochs_seen": CountEpochs.epochs, "evaluate": [float(v) for v in evaluation],
        "custom_losses": custom_losses,
        "rows": item_table(every_id).numpy().tolist(),
        "user_rows": user_table(every_user).numpy().tolist(),
        "custom_steps": len(custom_losses), "alltoall_exchanges": exchanges,
        "alltoall_ops": alltoall_ops(custom_step),
        "colors": color_table(np.arange(COLORS)[:, None]).numpy().tolist(),
        "dense": [np.asarray(w).tolist() for layer in model.layers[-2:] for w in layer.get_weights()],
        "predictions": model.predict(x, batch_size=GLOBAL_BATCH, verbose=0).tolist(),
        "table_kind": type(item_table.table).__name__,
        "color_kind": type(color_table.table).__name__,
        "stored_rows": (item_table.table.shard.stored_rows
                        if hasattr(item_table.table, "shard") else None)})
