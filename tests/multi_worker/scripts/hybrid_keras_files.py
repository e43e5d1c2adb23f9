"""Worker script: Keras's one-file saves of tables sharded over the workers (HybridStrategy).

Two sharded tables ("item_table", "user_table": rows spread over the workers,
trained by Adagrad, whose slots the files must carry) and a replicated one
("color_table"). Records travel in chunks of 2 rows (CHUNK_BYTES lowered), so
every save and load goes through many chunks.

Environment: DIR (a folder every worker shares), MODE:
  first (2 workers): `fit` 2 epochs with ModelCheckpoint + BackupAndRestore (the
    uninterrupted run), then `save_weights`, `model.save` and a
    `tf.train.Checkpoint` of the item table; then a second model `fit`s with BackupAndRestore and
    is interrupted by an exception after its first epoch (a preemption).
  one (1 worker): `load_weights` / `load_model` of first's files (2 -> 1
    workers); a restore of the table's checkpoint inside a tf.function (the
    layer built there) followed by a lookup in the same function; then one epoch of training, saved to
    one.weights.h5.
  resume (2 workers): `load_weights` of one.weights.h5 (1 -> 2 workers); then
    a new model `fit`s 2 epochs with tfx_dist.BackupAndRestore over the
    interrupted run's backup: it resumes at epoch 2.
Every mode reports the lookups of every id of each table and the dense weights.
"""
import json
import os

import h5py
import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist.checkpointing import remove_temp_dirpath, write_filepath
from tfx_dist.tables import keras_file
from worker_lib import click_model, report

MODE, DIR = os.environ["MODE"], os.environ["DIR"]
ROWS, USERS, COLORS, GLOBAL_BATCH = 40, 30, 5, 32
keras_file.CHUNK_BYTES = 64  # 2 records per chunk: many chunks, interleaved across workers

rs = np.random.RandomState(0)
items = rs.randint(0, ROWS, (192, 3)).astype("int64")
colors = rs.randint(0, COLORS, (192, 1)).astype("int64")
users = rs.randint(0, USERS, (192, 1)).astype("int64")
labels = (((items[:, 0] % 2) == 0) ^ (users[:, 0] % 3 == 0)).astype("float32")[:, None]
x = {"items": items, "colors": colors, "users": users}
every = {"items": np.arange(ROWS)[:, None].repeat(3, axis=1),  # the mean of 3 copies: the row
         "users": np.arange(USERS)[:, None], "colors": np.arange(COLORS)[:, None]}

strategy = tfx_dist.HybridStrategy()
rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]


def build_model():
    with strategy.scope():
        inputs = {"items": keras.Input((3,), dtype="int64", name="items"),
                  "colors": keras.Input((1,), dtype="int64", name="colors"),
                  "users": keras.Input((1,), dtype="int64", name="users")}
        tables = {
            "items": tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", placement="sharded",
                                                      embeddings_initializer="zeros", name="item_table"),
            "users": tfx_dist.layers.ShardedEmbedding(USERS, 3, combiner="sum", placement="sharded",
                                                      embeddings_initializer="zeros", name="user_table"),
            "colors": tfx_dist.layers.ShardedEmbedding(COLORS, 2, combiner="sum", name="color_table",
                                                       placement="replicated",
                                                       embeddings_initializer="zeros"),
        }
        # tanh: the tables start at zeros, where a ReLU would pass them no gradient.
        features = keras.layers.Concatenate()([tables[k](inputs[k]) for k in ("items", "colors", "users")])
        return click_model(inputs, features, hidden_units=8, learning_rate=0.3)


def state(model):
    """Every table's lookups of every id, the table kinds and the dense weights."""
    return {"lookups": {k: model.get_layer(name)(every[k]).numpy().tolist()
                        for k, name in (("items", "item_table"), ("users", "user_table"),
                                        ("colors", "color_table"))},
            "kinds": [type(model.get_layer(n).table).__name__
                      for n in ("item_table", "user_table", "color_table")],
            "dense": [w.tolist() for n in ("hidden", "out") for w in model.get_layer(n).get_weights()]}


def fit(model, epochs, callbacks):
    return model.fit(x, labels, batch_size=GLOBAL_BATCH, epochs=epochs, shuffle=False, verbose=0,
                     callbacks=callbacks)


class Preempted(Exception):
    pass


class PreemptAfterFirstEpoch(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        raise Preempted(f"epoch {epoch}")


def path(name):
    return os.path.join(DIR, name)


def file_layout(name):
    """What a written .weights.h5 holds for the item table: its records' shape, or the marker."""
    with h5py.File(name, "r") as f:
        group = f["layers/sharded_embedding/vars"]  # Keras names entries by class
        if "tfx_table_records" in group:
            return list(group["tfx_table_records"].shape)
        return bytes(np.asarray(group["tfx_table_writer"])).decode()


out = {}
if MODE == "first":
    model = build_model()
    history = fit(model, 2, [keras.callbacks.ModelCheckpoint(path("mc.keras")),
                             keras.callbacks.BackupAndRestore(path("backup_uninterrupted"))])
    out["loss"] = history.history["loss"]
    out["final"] = state(model)
    weights = write_filepath(path("w.weights.h5"), strategy)
    os.makedirs(os.path.dirname(weights), exist_ok=True)
    model.save_weights(weights)
    out["weights_file"] = file_layout(weights)
    model.save(write_filepath(path("m.keras"), strategy))
    tf.train.Checkpoint(item=model.get_layer("item_table")).write(
        write_filepath(path("table_ckpt/ckpt"), strategy))
    remove_temp_dirpath(DIR, strategy)
    remove_temp_dirpath(path("table_ckpt"), strategy)
    interrupted = build_model()
    try:
        fit(interrupted, 2, [keras.callbacks.BackupAndRestore(path("backup")), PreemptAfterFirstEpoch()])
        out["preempted"] = None
    except Preempted as e:
        out["preempted"] = str(e)
elif MODE == "one":
    # A table restored inside a tf.function (TensorFlow's graph restore calls
    # _restore_from_tensors there: a py_function), then looked up in the same
    # function. First in the job: the checkpoint's table files restore into the
    # table of the same id (0).
    restored = build_model()
    table = restored.get_layer("item_table").table
    with h5py.File(path("w.weights.h5"), "r") as f:  # the slots' optimizer rule, as saved
        rule = bytes(np.asarray(f["layers/sharded_embedding/vars/tfx_table_optimizer"])).decode()

    @tf.function
    def restore_then_lookup(ids):
        graph_restore = table._restore_from_tensors({
            "shard_prefix": tf.constant(path("table_ckpt/ckpt-tfx_ps-item_table-0")),
            "optimizer": tf.constant(rule)})
        return restored.get_layer("item_table")(ids), graph_restore is not None

    rows, in_graph = restore_then_lookup(tf.constant(every["items"]))
    out["restore_in_function"] = rows.numpy().tolist()
    out["graph_restores"] = [bool(in_graph)]
    # Deterministic (the run above may get the order right by chance): in the
    # graph, the table's lookup waits for the restore's py_function.
    graph = restore_then_lookup.get_concrete_function(tf.constant(every["items"])).graph
    out["lookup_waits_for_restore"] = [
        any(c.type == "EagerPyFunc" for c in op.control_inputs)
        for op in graph.get_operations() if op.type == "TfxStoreLookup"]
    model = build_model()
    model.load_weights(path("w.weights.h5"))
    out["load_weights"] = state(model)
    with strategy.scope():
        out["load_model"] = state(keras.models.load_model(path("m.keras")))
        out["model_checkpoint"] = state(keras.models.load_model(path("mc.keras")))
    fit(model, 1, [])
    out["trained"] = state(model)
    model.save_weights(path("one.weights.h5"))
elif MODE == "resume":
    model = build_model()
    model.load_weights(path("one.weights.h5"))
    out["load_weights"] = state(model)
    resumed = build_model()
    history = fit(resumed, 2, [tfx_dist.BackupAndRestore(path("backup"))])
    out["resumed_epochs"] = len(history.history["loss"])
    out["final"] = state(resumed)
report(out)
