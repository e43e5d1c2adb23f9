"""Worker script: one Keras file format for every table placement.

A click model with a ShardedEmbedding table trained by Adagrad. Environment:
STRATEGY=ps|hybrid|none (parameter servers, tables sharded over the workers,
or no strategy at all: a local table), DIR (a folder every task shares), MODE:
  save: `fit` one epoch, then `save_weights` (DIR/<strategy>.weights.h5) and
    `model.save` (DIR/<strategy>.keras); report the predictions.
  load: for each file of another strategy (FROM, comma-separated), build the
    model under this one and `load_weights` it, then `keras.models.load_model`
    its .keras (inside the strategy's scope, compiled); report the predictions,
    the tables whose optimizer state restarted (a warning), the optimizer's step
    count and the losses of one more epoch of the loaded model.
"""
import os
import warnings

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist.checkpointing import remove_temp_dirpath, write_filepath
from worker_lib import click_model, report

STRATEGY, MODE, DIR = os.environ["STRATEGY"], os.environ["MODE"], os.environ["DIR"]
ROWS = 40
rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (128, 3)).astype("int64")
labels = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]
probe = np.arange(ROWS * 3).reshape(ROWS, 3) % ROWS  # every row, in several combinations

if STRATEGY == "ps":
    strategy = tfx_dist.ParameterServerStrategy()
elif STRATEGY == "hybrid":
    strategy = tfx_dist.HybridStrategy()
else:
    strategy = tf.distribute.get_strategy()


def build_model():
    with strategy.scope():
        inputs = keras.Input((3,), dtype="int64")
        x = tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", placement="sharded",
                                             name="items")(inputs)
        return click_model(inputs, x, hidden_units=4, learning_rate=0.5)


def predictions(model):
    # Called on every worker: a table sharded over the workers looks up by all-to-all.
    return np.asarray(model(probe)).ravel().tolist()


def path(name):
    return os.path.join(DIR, name)


out = {"placement": None}
if MODE == "save":
    model = build_model()
    model.fit(ids, labels, batch_size=32, epochs=1, shuffle=False, verbose=0)
    out["placement"] = model.get_layer("items").table.placement.value
    out["predictions"] = predictions(model)
    out["iterations"] = int(model.optimizer.iterations.numpy())
    for name, save in ((f"{STRATEGY}.weights.h5", model.save_weights), (f"{STRATEGY}.keras", model.save)):
        target = write_filepath(path(name), strategy)  # a non-chief's: a temporary folder
        os.makedirs(os.path.dirname(target), exist_ok=True)
        save(target)
    remove_temp_dirpath(DIR, strategy)
else:
    for source in os.environ["FROM"].split(","):
        model = build_model()
        out["placement"] = model.get_layer("items").table.placement.value
        model.load_weights(path(f"{source}.weights.h5"))
        out[f"{source}.weights.h5"] = predictions(model)
        with strategy.scope(), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            # Keras's optimizer slots of the table's variable are placement-specific (an
            # anchor's, or the whole table's): those of another placement restart.
            loaded = keras.models.load_model(path(f"{source}.keras"))
        out[f"{source}.keras"] = predictions(loaded)
        out[f"{source}.restarted"] = sorted(str(w.message).split("'")[1] for w in caught
                                            if "optimizer state restarts" in str(w.message))
        out[f"{source}.iterations"] = int(loaded.optimizer.iterations.numpy())
        out[f"{source}.losses"] = loaded.fit(ids, labels, batch_size=32, epochs=1, shuffle=False,
                                             verbose=0).history["loss"]
report(out)
