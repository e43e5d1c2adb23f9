"""Worker script: checkpoints of ShardedEmbedding tables on parameter servers.

Environment: PHASE=save|restore, CKPT (a folder every task shares), EPOCHS
(of training before the save), DYNAMIC=1 (a dynamic table fed hashed ids),
OPTIMIZER (Keras class name), BAD_FILES=1 (restore phase: first try a copy of
the checkpoint with a shard file missing, then one with a corrupt shard file,
and report the errors and the rows after each).

save: trains EPOCHS epochs, saves with tf.train.CheckpointManager (the chief
to CKPT, the others to temporary folders), reports the rows, trains one more
epoch and reports the rows again (the continuation to compare with); also
saves with Keras's save_weights and model.save (CKPT + "_keras/w<rank>.weights.h5",
"m<rank>.keras").
restore: builds the same model, restores CKPT, reports the rows, trains the
same one more epoch, reports the rows. Any number of servers. KERAS=1: loads a
copy of the chief's .weights.h5 with load_weights instead.

save also checks Keras's callbacks: its first EPOCHS epochs run as fit(EPOCHS + 1)
with BackupAndRestore (CKPT + "_backup") and ModelCheckpoint (CKPT + "_mc/model.keras"),
stopped by an error at the end of epoch EPOCHS, after both saved (a preemption).
resume (a new job, 2 servers): keras.models.load_model of a copy of the
ModelCheckpoint file, reports the rows; trains one epoch away from the backup
(rows, the servers' slots and Keras's weights move), then fit(EPOCHS + 1) with
BackupAndRestore, which must restore the backup and train the last epoch only.
MIXED=<rank> (resume): that worker builds the model (its optimizer unbuilt, as a
user's script would) and calls load_weights instead of load_model.
DENSE=servers: the dense variables live on the servers; TRAIN_FIRST=1 (restore
phase): train one epoch before restoring, so the restore must overwrite dense
weights the servers already hold.
"""
import os
import shutil
import sys

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist import checkpointing
from worker_lib import rank, report

PHASE = os.environ["PHASE"]
CKPT = os.environ["CKPT"]
DYNAMIC = os.environ.get("DYNAMIC") == "1"
KERAS_DIR = CKPT + "_keras"
ROWS, GLOBAL_BATCH = 40, 32

rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (256, 3)).astype("int64")
labels = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]
if DYNAMIC:
    ids = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)
every_id = np.unique(ids)[:, None].repeat(3, axis=1)

# Every temporary file or folder this worker's Python code creates (dense values used to
# reach the servers through one; they must now go over the connections).
temp_files = []
sys.addaudithook(lambda event, args: temp_files.append(str(args[0])) if event in (
    "tempfile.mkstemp", "tempfile.mkdtemp") else None)
strategy = tfx_dist.ParameterServerStrategy(dense_variables=os.environ.get("DENSE", "workers"))
KERAS_COPY = os.path.join(os.environ["WORKDIR"], f"keras_copy_{rank()}")
BACKUP_DIR, MC_DIR = CKPT + "_backup", CKPT + "_mc"


def build_model():
    inputs = keras.Input((3,), dtype="int64")
    table = tfx_dist.layers.ShardedEmbedding(None if DYNAMIC else ROWS, 4, combiner="mean",
                                             embeddings_initializer="uniform", name="items")
    outputs = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(table(inputs))
    model = keras.Model(inputs, outputs)
    optimizer = getattr(keras.optimizers, os.environ.get("OPTIMIZER", "Adagrad"))(0.5)
    model.compile(optimizer, "binary_crossentropy")
    if os.environ.get("MIXED") is None:
        optimizer.build(model.trainable_variables)
    return model, table, optimizer


with strategy.scope():
    if PHASE == "resume":  # the model, its rows and its optimizer from ModelCheckpoint's file
        mc_copy = os.path.join(os.environ["WORKDIR"], f"mc_copy_{rank()}")
        shutil.copytree(MC_DIR, mc_copy)
        if os.environ.get("MIXED") is not None and rank() == int(os.environ["MIXED"]):
            model, table, optimizer = build_model()
            model.load_weights(os.path.join(mc_copy, "model.keras"))
        else:
            model = keras.models.load_model(os.path.join(mc_copy, "model.keras"))
            table, optimizer = model.get_layer("items"), model.optimizer
    else:
        model, table, optimizer = build_model()
checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)


def rows():
    return table(every_id).numpy().tolist()  # the mean of three copies of a row: the row


def fit(epochs, callbacks=()):
    return model.fit(ids, labels, batch_size=GLOBAL_BATCH, epochs=epochs, shuffle=False,
                     verbose=0, callbacks=list(callbacks)).history["loss"]


class StopAfterEpoch(keras.callbacks.Callback):
    """A preemption: an error once the epoch's saves are done (listed after the savers)."""

    def __init__(self, last):
        super().__init__()
        self.last = last

    def on_epoch_end(self, epoch, logs=None):
        if epoch + 1 == self.last:
            raise RuntimeError(f"interrupted after epoch {self.last}")


class RowsAtTrainBegin(keras.callbacks.Callback):
    """The rows once BackupAndRestore (listed before) has restored the backup."""

    def on_train_begin(self, logs=None):
        result["rows_at_resume"] = rows()


result = {}
EPOCHS = int(os.environ.get("EPOCHS", "1"))


def fit_until_interrupted():
    """The first EPOCHS epochs, saved by Keras's callbacks on the way; returns the error."""
    try:
        fit(EPOCHS + 1, [keras.callbacks.BackupAndRestore(BACKUP_DIR, delete_checkpoint=False),
                         keras.callbacks.ModelCheckpoint(os.path.join(MC_DIR, "model.keras")),
                         StopAfterEpoch(EPOCHS)])
    except RuntimeError as e:
        return str(e)
    return None


if PHASE == "resume":
    result["rows_saved"] = rows()
    result["dense_saved"] = [w.tolist() for w in model.layers[-1].get_weights()]
    fit(1)  # away from the backup: rows, the servers' slots and Keras's weights all move
    result["rows_moved"] = rows()
elif PHASE == "save":
    result["interrupted"] = fit_until_interrupted()
    result["backup_files"] = sorted(os.listdir(BACKUP_DIR))
    result["mc_files"] = sorted(os.listdir(MC_DIR))
    path = checkpointing.write_dirpath(CKPT, strategy)
    manager = tf.train.CheckpointManager(checkpoint, path, max_to_keep=1)
    result["first_saved"] = manager.save()
    result["saved"] = manager.save()  # max_to_keep=1: deletes the first, shard files included
    checkpointing.remove_temp_dirpath(CKPT, strategy)
    result["rows_saved"] = rows()
    result["dense_saved"] = [w.tolist() for w in model.layers[-1].get_weights()]
    result["files"] = sorted(os.listdir(CKPT))
    # Keras's one-file save: the table's rows in the chief's file.
    os.makedirs(KERAS_DIR, exist_ok=True)
    model.save_weights(os.path.join(KERAS_DIR, f"w{rank()}.weights.h5"))
    model.save(os.path.join(KERAS_DIR, f"m{rank()}.keras"))
    result["keras_files"] = sorted(os.listdir(KERAS_DIR))
else:
    latest = tf.train.latest_checkpoint(CKPT)
    if os.environ.get("TRAIN_FIRST") == "1":
        fit(1)
    if os.environ.get("BAD_FILES") == "1":
        result["rows_before"] = rows()
        for damage in ("missing", "corrupt"):
            bad = os.path.join(os.environ["WORKDIR"], f"bad_{damage}_{rank()}")
            shutil.copytree(CKPT, bad)
            prefix = os.path.join(bad, os.path.basename(latest))
            shard = sorted(f for f in os.listdir(bad) if ".shard-0-of-" in f)[0]
            if damage == "missing":
                os.remove(os.path.join(bad, shard))
            else:
                with open(os.path.join(bad, shard), "r+b") as f:
                    f.seek(-20, os.SEEK_END)
                    byte = f.read(1)
                    f.seek(-20, os.SEEK_END)
                    f.write(bytes([byte[0] ^ 0xFF]))
            try:
                checkpoint.restore(prefix)
                result[f"{damage}_error"] = None
            except Exception as e:  # noqa: BLE001 - the test reads the message
                result[f"{damage}_error"] = f"{type(e).__name__}: {e}"
            result[f"{damage}_shard"] = os.path.join(bad, shard)
            result[f"rows_after_{damage}"] = rows()
        strategy.extended.barrier()  # no worker restores the good files before all have read
    if os.environ.get("KERAS") == "1":  # the chief's .weights.h5, copied elsewhere first
        shutil.copytree(KERAS_DIR, KERAS_COPY)
        model.load_weights(os.path.join(KERAS_COPY, "w0.weights.h5"))
        strategy.extended.barrier()  # both loads done before either worker reads or trains
    else:
        checkpoint.restore(latest).assert_existing_objects_matched()
        strategy.extended.barrier()  # both restores done before either worker trains
    result["rows_saved"] = rows()
    result["dense_saved"] = [w.tolist() for w in model.layers[-1].get_weights()]
if PHASE == "resume":  # restores the backup, then trains the third epoch only
    result["resumed_losses"] = fit(EPOCHS + 1, [keras.callbacks.BackupAndRestore(BACKUP_DIR), RowsAtTrainBegin()])
else:
    fit(1)
result["temp_files"] = temp_files
result["rows_continued"] = rows()
result["dense_continued"] = [w.tolist() for w in model.layers[-1].get_weights()]
if PHASE == "restore" and os.environ.get("DENSE") == "servers" and not DYNAMIC:
    # ASSIGN in chunks of 4 rows (100 bytes): the chief sets the 40-row table to known values
    # over the connections; every worker then reads them back.
    import ctypes
    from tfx_dist.parameter_server import _native
    strategy.extended.barrier()
    if rank() == 0:
        all_ids = np.arange(ROWS, dtype=np.int64)
        values = (np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4) / 7).copy()
        _native.call(_native.lib().tfx_ps_assign, strategy.extended._ps_client, table.table.table_id,
                     all_ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), ROWS,
                     values.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 0, 100)
    strategy.extended.barrier()
    result["assigned_rows"] = table(np.arange(ROWS)[:, None].repeat(3, axis=1)).numpy().tolist()
report(result)
