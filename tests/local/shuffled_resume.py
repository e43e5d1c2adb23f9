"""Run by tests/local/test_fault_tolerance.py in its own process (one strategy per process): a Keras fit
under a 1-worker tfx_dist.MultiWorkerMirroredStrategy with tfx_dist.fault_tolerance.StepCheckpoint,
SIGTERM after step 6, resumed in the same process, against the same fit uninterrupted; for Keras's
shuffle=True on NumPy arrays, a seeded reshuffling tf.data pipeline and an unseeded one. Prints one
JSON line: for each input, the largest relative difference of the final weights, and the warnings.
"""
import json
import logging
import os
import signal
import sys

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist.fault_tolerance import StepCheckpoint

WORKDIR = sys.argv[1]
strategy = tfx_dist.MultiWorkerMirroredStrategy()
rs = np.random.RandomState(0)
x = rs.normal(size=(48, 3)).astype("float32")
y = (x @ np.array([[1.0], [-2.0], [0.5]], "float32")).astype("float32")
warnings = []


class Collect(logging.Handler):
    def emit(self, record):
        if "reshuffles each iteration" in record.getMessage():
            warnings.append(record.getMessage())


logging.getLogger("tfx_dist.fault_tolerance").addHandler(Collect())


class TermAfter(keras.callbacks.Callback):
    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


def fit(kind, directory, stop_at=None):
    keras.utils.set_random_seed(7)
    if kind == "unseeded":
        tf.random.set_seed(None)
    with strategy.scope():
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, activation="tanh"),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.05), "mse")
    callbacks = ([TermAfter(stop_at)] if stop_at else []) + [StepCheckpoint(directory)]
    if kind == "numpy":
        model.fit(x, y, batch_size=8, epochs=3, shuffle=True, verbose=0, callbacks=callbacks)
    else:
        data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(
            48, seed=5 if kind == "seeded" else None, reshuffle_each_iteration=True).batch(8)
        model.fit(data, epochs=3, verbose=0, callbacks=callbacks)
    return model.get_weights()


result = {}
for kind in ("numpy", "seeded", "unseeded"):
    directory = os.path.join(WORKDIR, kind)
    try:
        fit(kind, directory, stop_at=9)  # epoch 1, after its third batch of six
        raise AssertionError("no preemption")
    except SystemExit as stop:
        assert stop.code == 75, stop.code
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    resumed = fit(kind, directory)
    full = fit(kind, os.path.join(WORKDIR, kind + "-full"))
    result[kind] = max(float(np.max(np.abs(a - b) / (np.abs(b) + 1e-6))) for a, b in zip(resumed, full))
result["warnings"] = warnings
print("RESULT " + json.dumps(result), flush=True)
