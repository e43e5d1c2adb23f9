"""Worker script: Keras 3 fit (with validation), evaluate and predict.

Environment: MODE=multi|reference (reference: one process, no strategy, same
global batch), INPUT=numpy|dataset|from_function, LOCAL_DEVICES (logical CPUs
per worker), EPOCHS, STEPS_PER_EXECUTION, GLOBAL_BATCH (default 48).
"""
import os

import numpy as np
import tensorflow as tf

LOCAL = int(os.environ.get("LOCAL_DEVICES", "1"))
if LOCAL > 1:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * LOCAL)

import keras  # noqa: E402

from worker_lib import make_strategy, regression_data, report  # noqa: E402

MODE = os.environ.get("MODE", "multi")
INPUT = os.environ.get("INPUT", "numpy")
EPOCHS = int(os.environ.get("EPOCHS", "2"))
GLOBAL_BATCH = int(os.environ.get("GLOBAL_BATCH", "48"))

x, y = regression_data(n=288)
x_val, y_val = x[:96], y[:96]
if MODE == "reference":
    strategy = tf.distribute.get_strategy()
else:
    devices = [f"/device:CPU:{i}" for i in range(LOCAL)] if LOCAL > 1 else None
    strategy = make_strategy(devices=devices)

keras.utils.set_random_seed(1234 + int(os.environ.get("SEED_OFFSET", "0")))
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse", metrics=["mae"],
                  steps_per_execution=int(os.environ.get("STEPS_PER_EXECUTION", "1")))
initial = [w.tolist() for w in model.get_weights()]
contexts = []

if INPUT == "numpy":
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
                        validation_data=(x_val, y_val))
elif INPUT == "dataset":
    train = tf.data.Dataset.from_tensor_slices((x, y)).batch(GLOBAL_BATCH)
    val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(GLOBAL_BATCH)
    history = model.fit(train, epochs=EPOCHS, verbose=0, validation_data=val)
elif INPUT == "from_function":
    def dataset_fn(ctx):
        contexts.append([ctx.input_pipeline_id, ctx.num_input_pipelines,
                         ctx.num_replicas_in_sync])
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        ds = ds.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return ds.batch(ctx.get_per_replica_batch_size(GLOBAL_BATCH))

    train = strategy.distribute_datasets_from_function(dataset_fn)
    history = model.fit(train, epochs=EPOCHS, verbose=0, validation_data=(x_val, y_val))
else:
    raise ValueError(INPUT)

evaluation = model.evaluate(x_val, y_val, batch_size=GLOBAL_BATCH, verbose=0)
# 97 = 2 x 48 + 1: in the last batch one worker gets the example and the other none.
predictions = model.predict(x[:97], batch_size=GLOBAL_BATCH, verbose=0)
report({
    "history": history.history,
    "evaluate": evaluation,
    "predictions": predictions.tolist(),
    "initial_weights": initial,
    "weights": [w.tolist() for w in model.get_weights()],
    "num_replicas": strategy.num_replicas_in_sync,
    "contexts": contexts,
})
