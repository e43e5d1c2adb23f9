"""Worker script, run under tfx-dist-run: first a Keras fit with tfx_dist.BackupAndRestore saving every
SAVE_FREQ steps (step-exact), dropout and an Adam learning-rate schedule, NumPy input in a fixed order.

STOP="<rank>:<step>:<TERM|KILL>,...": unless SHARED/stopped-<step> exists, that rank creates it and
sends itself the signal right after global step <step> (a real signal through the kernel; TERM is
sent twice). Rank 0 reports the step this run started from, the steps it trained and the final
weights.
DROPOUT sets the dropout rate (default 0.25). SHUFFLE=1: Keras shuffles the arrays (shuffle=True);
rank 0 then also reports the seed of their order (each epoch's: tfx_dist.input.array_order).

Then, unless FIT_ONLY is set, a custom loop of RUNS steps under
tf.distribute.experimental.PreemptionCheckpointHandler (TensorFlow's API, unchanged):
"<rank>:<run>:LOOPTERM" in STOP sends that rank SIGTERM after that many run calls. Rank 0
reports the run it started from and the loop's final weights.
"""
import os
import signal
import sys

import keras

import tfx_dist
from tfx_dist.input import array_order
from worker_lib import make_strategy, rank, regression_data, report, weights_digest

SHARED = os.environ["SHARED"]
STOPS = [s.split(":") for s in os.environ.get("STOP", "").split(",") if s]
strategy = make_strategy()
x, y = regression_data(n=96)
keras.utils.set_random_seed(7)  # the same initial weights in every run
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)),
                              keras.layers.Dense(16, activation="relu"),
                              keras.layers.Dropout(float(os.environ.get("DROPOUT", "0.25"))),
                              keras.layers.Dense(1)])
    schedule = keras.optimizers.schedules.ExponentialDecay(0.02, decay_steps=3, decay_rate=0.8)
    model.compile(keras.optimizers.Adam(schedule), "mse")


class Progress(keras.callbacks.Callback):
    start_step = None
    trained = []

    def on_epoch_begin(self, epoch, logs=None):
        if Progress.start_step is None:
            Progress.start_step = int(model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = int(model.optimizer.iterations.numpy())
        if step == (Progress.trained[-1] if Progress.trained else Progress.start_step):
            return  # a batch dropped by the resume (the step did not move)
        Progress.trained.append(step)
        for who, at, sig in STOPS:
            marker = os.path.join(SHARED, f"stopped-{at}")
            mine = sig in ("TERM", "KILL") and (int(who), int(at)) == (rank(), step)
            if mine and not os.path.exists(marker):
                open(marker, "w").close()
                for _ in range(2 if sig == "TERM" else 1):
                    os.kill(os.getpid(), getattr(signal, "SIG" + sig))


backup = tfx_dist.BackupAndRestore(os.path.join(SHARED, "ckpt"), save_freq=4, delete_checkpoint=False)
model.fit(x, y, batch_size=24, epochs=4, shuffle=bool(os.environ.get("SHUFFLE")), verbose=0,
          callbacks=[Progress(), backup])
if rank() == 0:
    order = array_order.latest_order()
    report({"start_step": Progress.start_step, "trained": Progress.trained, "weights": weights_digest(model),
            "seed": order.seed if order is not None else None})
if os.environ.get("FIT_ONLY"):
    sys.exit(0)

# -- then a custom loop under TensorFlow's PreemptionCheckpointHandler, as TensorFlow documents it --
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

GLOBAL_BATCH, RUNS = 16, 10
with strategy.scope():
    net = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, activation="tanh"),
                            keras.layers.Dense(1)])
    optimizer = keras.optimizers.Adam(0.01)
    optimizer.build(net.trainable_variables)
checkpoint = tf.train.Checkpoint(model=net, optimizer=optimizer)
handler = tf.distribute.experimental.PreemptionCheckpointHandler(
    strategy.cluster_resolver, checkpoint, os.path.join(SHARED, "loop_ckpt"))
start = handler.total_run_calls
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(GLOBAL_BATCH).skip(start)
iterator = iter(strategy.experimental_distribute_dataset(dataset))


@tf.function
def train_step(batch):
    def step_fn(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(tf.reduce_mean(tf.square(net(xb) - yb), axis=-1),
                                              global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, net.trainable_variables)
        optimizer.apply_gradients(zip(grads, net.trainable_variables))
    strategy.run(step_fn, args=batch)


for run in range(start, RUNS):
    handler.run(train_step, next(iterator))
    for who, at, sig in STOPS:
        marker = os.path.join(SHARED, f"stopped-loop-{at}")
        if sig == "LOOPTERM" and (int(who), int(at)) == (rank(), run + 1) and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGTERM)
if rank() == 0:
    report({"loop_start": start, "loop_runs": handler.total_run_calls,
            "loop_weights": [np.asarray(w).tolist() for w in net.get_weights()]})
