"""Worker script: a click model whose ShardedEmbedding tables live on parameter servers.

Environment: MODE=ps|reference (reference: one process, no strategy, local
tables, the same global batch), OPTIMIZER (a Keras optimizer class name),
EPOCHS, PS_MODE (sync|async), DYNAMIC=1 (a dynamic table fed hashed ids),
BAD_ID=1 (first look up an id out of range and report the error), DIE_RANK
(that worker exits abruptly after its first epoch). The tables start at zeros
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
labels = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]
if DYNAMIC:  # hashed-feature ids: anywhere in int64, negative included
    ids = (ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)).view(np.int64)

strategy = (tfx_dist.ParameterServerStrategy(mode=os.environ.get("PS_MODE", "sync")) if MODE == "ps"
            else tf.distribute.get_strategy())
rank = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
with strategy.scope():
    inputs = keras.Input((3,), dtype="int64")
    table = tfx_dist.layers.ShardedEmbedding(None if DYNAMIC else ROWS, 4, combiner="mean",
                                             embeddings_initializer="zeros", name="items")
    hidden = table(inputs)
    outputs = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    optimizer = getattr(keras.optimizers, os.environ.get("OPTIMIZER", "Adagrad"))(0.5)
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
                    callbacks=[DieAfterFirstEpoch()])
every_id = np.unique(ids)[:, None].repeat(3, axis=1)
rows = table(every_id).numpy()  # mean of three copies of the row: the row itself
report({"loss": history.history["loss"], "rows": rows.tolist(),
        "dense": [w.tolist() for w in model.layers[-1].get_weights()],
        "predictions": model.predict(ids[:16], verbose=0).tolist(),
        "bad_id_error": bad_id_error})
