"""Worker script: a click model whose ShardedEmbedding tables live on parameter servers.

Environment: MODE=ps|reference (reference: one process, no strategy, local
tables, the same global batch), OPTIMIZER (a Keras optimizer class name),
EPOCHS. The tables start at zeros and the dense layer from a fixed seed, so
both modes start from the same weights.
"""
import os

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from worker_lib import report

MODE = os.environ.get("MODE", "ps")
EPOCHS = int(os.environ.get("EPOCHS", "2"))
ROWS, GLOBAL_BATCH = 40, 32

rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (256, 3)).astype("int64")
labels = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]

strategy = tfx_dist.ParameterServerStrategy() if MODE == "ps" else tf.distribute.get_strategy()
with strategy.scope():
    inputs = keras.Input((3,), dtype="int64")
    table = tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", embeddings_initializer="zeros",
                                             name="items")
    hidden = table(inputs)
    outputs = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    optimizer = getattr(keras.optimizers, os.environ.get("OPTIMIZER", "Adagrad"))(0.5)
    model.compile(optimizer, "binary_crossentropy", metrics=["accuracy"])
history = model.fit(ids, labels, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
every_id = np.arange(ROWS, dtype="int64")[:, None].repeat(3, axis=1)
rows = table(every_id).numpy()  # mean of three copies of the row: the row itself
report({"loss": history.history["loss"], "rows": rows.tolist(),
        "dense": [w.tolist() for w in model.layers[-1].get_weights()],
        "predictions": model.predict(ids[:16], verbose=0).tolist(),
        "anchor_weights": len(model.trainable_weights)})
