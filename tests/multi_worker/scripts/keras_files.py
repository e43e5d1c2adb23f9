"""Worker script: Keras programs that write files, as the tutorials write them.

PHASE=save_load: the multi-worker tutorial's pattern, several times: every
worker saves (the chief to the real path, the others to a temporary folder),
then every worker loads the chief's file. The chief's writes are made slow on
purpose (a layer that sleeps while it is saved, a large extra variable in its
tf.train.Checkpoint), so a worker that loads before the chief is done fails.

PHASE=callbacks: `fit` with Keras's own file-writing callbacks, unchanged.

SHARED: a folder every worker sees.
"""
import os
import shutil
import time

import keras
import numpy as np
import tensorflow as tf

from worker_lib import make_strategy, rank, regression_data, report

PHASE = os.environ["PHASE"]
SHARED = os.environ["SHARED"]
strategy = make_strategy()
x, y = regression_data(n=128)
keras.utils.set_random_seed(1)
CHIEF = rank() == 0


@keras.saving.register_keras_serializable(package="tfx_dist_test")
class SlowToSave(keras.layers.Layer):
    """Identity; the chief takes a second to save it."""

    def call(self, inputs):
        return inputs

    def save_own_variables(self, store):
        if CHIEF:
            time.sleep(1.0)
        super().save_own_variables(store)


def build(slow=True):
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="relu")]
                                 + [SlowToSave()] * slow + [keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
    return model


def same(a, b):
    return all(np.array_equal(u, v) for u, v in zip(a.get_weights(), b.get_weights()))


def write_dir(dirpath):
    """The tutorial's convention: the chief writes `dirpath`, a worker a temp folder in it."""
    return dirpath if CHIEF else os.path.join(dirpath, f"workertemp_{rank()}")


def write_path(path):
    dirpath, base = os.path.split(path)
    return os.path.join(write_dir(dirpath), base)


out = {}
if PHASE == "save_load":
    model = build()
    model.fit(x, y, batch_size=32, epochs=1, verbose=0)
    loads = []
    for i in range(3):
        model.fit(x, y, batch_size=32, epochs=1, verbose=0)  # new weights each round
        path = os.path.join(SHARED, f"round{i}", "model.keras")
        os.makedirs(os.path.dirname(write_path(path)), exist_ok=True)
        model.save(write_path(path))
        loads.append(same(model, keras.models.load_model(path)))

        weights = os.path.join(SHARED, f"round{i}", "model.weights.h5")
        model.save_weights(write_path(weights))
        fresh = build()
        fresh.load_weights(weights)
        loads.append(same(model, fresh))
        if not CHIEF:
            shutil.rmtree(os.path.dirname(write_path(path)))

        ckpt_dir = os.path.join(SHARED, f"round{i}", "ckpt")
        state = {"model": model}
        if CHIEF:
            state["padding"] = tf.Variable(tf.ones([16_000_000]))  # 64 MB: a slow write
        manager = tf.train.CheckpointManager(tf.train.Checkpoint(**state),
                                             write_dir(ckpt_dir), max_to_keep=1)
        manager.save()
        restored = build()
        status = tf.train.Checkpoint(model=restored).restore(tf.train.latest_checkpoint(ckpt_dir))
        status.expect_partial()
        loads.append(same(model, restored))

        prefix = tf.train.Checkpoint(**state).save(write_path(ckpt_dir + "/direct"))
        expected = os.path.join(ckpt_dir, os.path.basename(prefix))
        reader = tf.train.load_checkpoint(expected)  # fails if the chief is not done
        loads.append(bool(reader.get_variable_to_shape_map()))
        if not CHIEF:
            shutil.rmtree(write_dir(ckpt_dir))
    out["loads"] = loads
elif PHASE == "callbacks":
    import tfx_dist

    model = build(slow=False)
    callbacks = [
        keras.callbacks.ModelCheckpoint(os.path.join(SHARED, "ckpt", "model_{epoch}.keras")),
        keras.callbacks.ModelCheckpoint(os.path.join(SHARED, "best.weights.h5"), monitor="loss",
                                        save_best_only=True, save_weights_only=True),
        keras.callbacks.BackupAndRestore(os.path.join(SHARED, "backup"), delete_checkpoint=False,
                                         double_checkpoint=True),
        tfx_dist.BackupAndRestore(os.path.join(SHARED, "backup2")),
        keras.callbacks.TensorBoard(os.path.join(SHARED, "tb"), histogram_freq=1),
        keras.callbacks.CSVLogger(os.path.join(SHARED, "log.csv")),
    ]
    paths = [dict(vars(c)) for c in callbacks]
    model.fit(x, y, batch_size=32, epochs=2, validation_data=(x[:32], y[:32]), verbose=0,
              callbacks=callbacks)
    model.evaluate(x, y, batch_size=32, verbose=0, callbacks=callbacks[4:5])
    strategy.barrier()
    out["files"] = sorted(os.path.relpath(os.path.join(d, f), SHARED)
                          for d, _, files in os.walk(SHARED) for f in files)
    with open(os.path.join(SHARED, "log.csv")) as f:
        out["csv"] = f.read().splitlines()
    out["paths_restored"] = all(getattr(c, k) == v[k] for c, v in zip(callbacks, paths)
                                for k in ("filepath", "backup_dir", "log_dir", "filename")
                                if k in v)
    out["temp_left"] = os.listdir(os.environ["TMPDIR"])
    out["pid"] = os.getpid()
report(out)
