"""Worker script: checkpoints (chief writes, others use temp dirs) and BackupAndRestore.

PHASE=checkpoint | full | crash | resume. SHARED: a folder every worker sees.
"""
import os

import numpy as np
import tensorflow as tf
import keras

from tfx_dist.checkpointing import (BackupAndRestore, remove_temp_dirpath, write_dirpath,
                                    write_filepath)
from worker_lib import make_strategy, rank, regression_data, report

PHASE = os.environ["PHASE"]
SHARED = os.environ["SHARED"]
strategy = make_strategy()
x, y = regression_data(n=192)
keras.utils.set_random_seed(42)  # the same initial weights in every job


def build():
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.02, momentum=0.9), "mse")
    return model


def weights(model):
    return [w.tolist() for w in model.get_weights()]


out = {}
if PHASE == "checkpoint":
    model = build()
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0)
    ckpt_dir = os.path.join(SHARED, "ckpt")
    checkpoint = tf.train.Checkpoint(model=model)
    manager = tf.train.CheckpointManager(checkpoint, write_dirpath(ckpt_dir, strategy), 1)
    manager.save()
    remove_temp_dirpath(ckpt_dir, strategy)
    h5 = os.path.join(SHARED, "h5", "model.weights.h5")
    os.makedirs(os.path.dirname(write_filepath(h5, strategy)), exist_ok=True)
    model.save_weights(write_filepath(h5, strategy))
    remove_temp_dirpath(os.path.dirname(h5), strategy)
    strategy.barrier()
    out["ckpt_files"] = sorted(os.listdir(ckpt_dir))
    out["h5_files"] = sorted(os.listdir(os.path.dirname(h5)))
    # Every worker restores the chief's checkpoint into a fresh model.
    restored = build()
    tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(ckpt_dir)).expect_partial()
    out["same_after_restore"] = all(np.array_equal(a, b) for a, b in
                                    zip(model.get_weights(), restored.get_weights()))
    from_h5 = build()
    from_h5.load_weights(h5)
    out["same_after_h5"] = all(np.array_equal(a, b) for a, b in
                               zip(model.get_weights(), from_h5.get_weights()))
else:
    model = build()

    class Crash(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            if PHASE == "crash" and epoch == 2 and rank() == 1:
                os._exit(3)  # a worker dies: the job is killed and restarted

    # BACKUP=keras: Keras's own callback, as users write it.
    backup_class = (keras.callbacks.BackupAndRestore if os.environ.get("BACKUP") == "keras"
                    else BackupAndRestore)
    backup = backup_class(os.path.join(SHARED, "backup"))
    history = model.fit(x, y, batch_size=32, epochs=3, shuffle=False, verbose=0,
                        callbacks=[backup, Crash()])
    out["epochs_run"] = len(history.history["loss"])
    out["loss"] = history.history["loss"]
    out["weights"] = weights(model)
    strategy.barrier()
    out["backup_left"] = os.path.exists(os.path.join(SHARED, "backup"))
report(out)
