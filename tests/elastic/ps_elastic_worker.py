"""A ParameterServerStrategy custom loop under `tfx-dist-run --elastic --ps 1` (on the ps task the
strategy serves, then exits).

Deterministic: step s trains on examples [s*G, (s+1)*G) of a fixed set, split evenly over the
workers there are (G = 6: 2 or 3 workers), loss summed over the global batch / G, SGD. So the
weights after STEPS steps do not depend on how many workers ran each step, and the test computes
them in numpy. The table (zeros at first) lives on the server; the dense layer on the workers,
all-reduced (or on the server too: DENSE=servers). Commits every COMMIT_EVERY steps (default 1):
a reset runs the steps since the last commit again, and the server rolls its table back to it. With
ELASTIC_JOIN_AT=k, a generation of fewer than 3 workers waits at step k until the replacement is
ready to join (so that it joins before the end).

Prints ``STEP <name> <pid> <generation> <rank> <size> <step>`` after each step and, at the end,
``DONE <name> <pid> <json>`` with the table's rows and the dense weights.
"""
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf

import tfx_dist
from tfx_dist.elastic import TensorFlowKerasState, membership, run

ROWS, DIM, G, LR = 12, 4, 6, 0.1
STEPS = int(os.environ.get("ELASTIC_STEPS", "30"))
TRACE = os.environ.get("ELASTIC_TRACE") == "1"
COMMIT_EVERY = int(os.environ.get("COMMIT_EVERY", "1"))
JOIN_AT = int(os.environ.get("ELASTIC_JOIN_AT", "0"))  # a smaller generation waits there for a joiner
NAME = os.environ.get("TFX_ELASTIC_WORKER", "?")

rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (STEPS * G, 1)).astype("int64")
labels = rs.randn(STEPS * G, 1).astype("float32")

strategy = tfx_dist.ParameterServerStrategy(dense_variables=os.environ.get("DENSE", "workers"))
with strategy.scope():
    inputs = keras.Input((1,), dtype="int64")
    hidden = tfx_dist.layers.ShardedEmbedding(ROWS, DIM, combiner="mean", embeddings_initializer="zeros",
                                              name="items")(inputs)
    outputs = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    optimizer = keras.optimizers.SGD(LR)
    optimizer.build(model.trainable_variables)
initial_dense = [w.tolist() for w in model.layers[-1].get_weights()]  # the same in every process


@tf.function
def train_step(x, y):
    def replica(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(model(x, training=True) - y)) / G
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss
    return strategy.run(replica, args=(x, y))


state = TensorFlowKerasState(model, optimizer, step=0)
resets = []
state.register_reset_callbacks([lambda: resets.append(
    [membership.generation().number, membership.generation().rank, membership.generation().size])])


@run
def train(state):
    while state.step < STEPS:
        generation = membership.generation()
        if state.step == JOIN_AT and generation.size < 3:
            deadline = time.monotonic() + 180
            while not membership.pending_change() and time.monotonic() < deadline:
                time.sleep(0.1)
            state.check_host_updates()  # the joiner is ready: every rank resets here
        local = G // generation.size
        lo = state.step * G + generation.rank * local
        train_step(tf.constant(ids[lo:lo + local]), tf.constant(labels[lo:lo + local]))
        state.step += 1
        if state.step % COMMIT_EVERY == 0:
            state.commit()
        print(f"STEP {NAME} {os.getpid()} {generation.number} {generation.rank} {generation.size} "
              f"{state.step}" + (f" {model.layers[-1].get_weights()[1][0]:.7f}" if TRACE else ""), flush=True)
        time.sleep(0.05)  # leaves the kill time to land mid-run


train(state)
rows = model.layers[1].table.lookup(tf.constant(np.arange(ROWS, dtype="int64"))).numpy()
print(f"DONE {NAME} {os.getpid()} " + json.dumps({
    "step": state.step, "rows": rows.tolist(), "dense": [w.tolist() for w in model.layers[-1].get_weights()],
    "initial_dense": initial_dense, "resets": resets}), flush=True)
