"""A typical Horovod Keras training script; only the import names tfx_dist.

Learning rate scaled by the number of ranks with a warmup, each rank on its
shard of the data, weights broadcast from rank 0, metrics averaged over the
ranks, checkpoints written by rank 0 only. The data is scikit-learn's 8x8
digits (as in ``examples/``). Prints ``RESULT {"accuracy": ..., ...}``.
"""

import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import tfx_dist.horovod.keras as hvd  # was: import horovod.tensorflow.keras as hvd  # noqa: E402

hvd.init()
keras.utils.set_random_seed(hvd.rank())  # different initial weights: the broadcast must fix them

x, y = load_digits(return_X_y=True)
x = (x / 16.0).astype("float32")
x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0,
                                                    stratify=y)
x_train, y_train = x_train[hvd.rank()::hvd.size()], y_train[hvd.rank()::hvd.size()]

model = keras.Sequential([
    keras.Input((64,)),
    keras.layers.Dense(128, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
epochs = int(os.environ.get("EPOCHS", "12"))
scaled_lr = 0.001 * hvd.size()
opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

callbacks = [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3, verbose=1),
]
checkpoint = os.path.join(os.environ.get("WORKDIR", "."), "checkpoint-{epoch}.keras")
if hvd.rank() == 0:
    callbacks.append(keras.callbacks.ModelCheckpoint(checkpoint))

history = model.fit(x_train, y_train, batch_size=32, epochs=epochs, callbacks=callbacks,
                    verbose=2 if hvd.rank() == 0 else 0)
loss, accuracy = model.evaluate(x_test, y_test, verbose=0)
first = keras.ops.convert_to_numpy(model.layers[0].kernel)
print("RESULT " + json.dumps({
    "rank": hvd.rank(), "size": hvd.size(), "accuracy": float(accuracy),
    "lr": [float(v) for v in history.history["lr"]],
    "train_accuracy": [float(v) for v in history.history["accuracy"]],
    "weights_checksum": float(np.sum(first)),
}), flush=True)
