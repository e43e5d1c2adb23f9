"""A worker of an elastic Horovod job (tfx_dist.horovod) run by tfx-dist-run --elastic.

ELASTIC_MODE=loop: a custom loop (DistributedGradientTape); fit: model.fit, one epoch per call.
The data position is an ElasticSampler in the state: each rank trains on its share of what is
left of the epoch, the share recomputed for the ranks of each generation. Each step also sums,
over the ranks, how often each example was used (kept in the state): at each epoch's end every
example must have been used once. Prints "STEP <worker> <pid> <generation> <rank> <size> <step>"
and "DONE <worker> <pid> <json>" (see elastic_job.py).
"""

import json
import os
import sys
import time

import numpy as np
import tensorflow as tf
import keras

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import tfx_dist.horovod as hvd  # noqa: E402
import tfx_dist.horovod.keras as hvd_keras  # noqa: E402
from tfx_dist.elastic import ElasticSampler, UpdateSamplerCallback, membership  # noqa: E402

MODE = os.environ.get("ELASTIC_MODE", "loop")
NAME = os.environ["TFX_ELASTIC_WORKER"]
EPOCHS, BATCH, N = 3, 16, 960

hvd.init()
rng = np.random.default_rng(0)
labels = rng.integers(0, 4, N + 400)
x_all = (rng.normal(size=(N + 400, 16)) + 3.0 * np.eye(16)[labels * 4]).astype(np.float32)
x, y, x_test, y_test = x_all[:N], labels[:N], x_all[N:], labels[N:]

keras.utils.set_random_seed(1)
model = keras.Sequential([keras.Input((16,)), keras.layers.Dense(32, activation="relu"),
                          keras.layers.Dense(4)])
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
opt = keras.optimizers.SGD(0.1)
resets = []


def report_step(state):
    g = membership.generation()
    state.step += 1
    print(f"STEP {NAME} {os.getpid()} {g.number} {g.rank} {g.size} {state.step}", flush=True)


def count_used(state, indices):
    """Adds how often each example was used in this step, summed over the ranks."""
    used = np.bincount(indices, minlength=N).astype(np.float32)
    state.used += hvd.allreduce(used, op=hvd.Sum, name="used").numpy()


def end_epoch(state):
    state.used_per_epoch.append([float(state.used.min()), float(state.used.max())])
    state.used = np.zeros(N, np.float32)
    state.epoch += 1
    state.sampler.set_epoch(state.epoch)
    state.commit()
    # After a lost worker, the survivors wait for its replacement at the end of the first epoch
    # (a TensorFlow start under load may outlast the whole run): it joins at one of these checks.
    while state.epoch == 1 and hvd.size() < 3:
        time.sleep(0.2)
        state.check_host_updates()


if MODE == "loop":
    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            loss = loss_fn(yb, model(xb, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    opt.build(model.trainable_variables)
else:
    model.compile(optimizer=hvd_keras.DistributedOptimizer(opt), loss=loss_fn)
    opt = model.optimizer  # the distributed one (a new optimizer made from opt's config)
    opt.build(model.trainable_variables)

state = hvd.elastic.TensorFlowKerasState(model, opt, epoch=0, step=0, sampler=ElasticSampler(N, seed=5),
                                         used=np.zeros(N, np.float32), used_per_epoch=[])
state.register_reset_callbacks([lambda: resets.append(list(membership.generation().joined))])


class _Progress(keras.callbacks.Callback):
    def __init__(self, state, indices):
        super().__init__()
        self.state, self.indices = state, indices

    def on_train_batch_end(self, batch, logs=None):
        count_used(self.state, self.indices[batch * BATCH:(batch + 1) * BATCH])
        report_step(self.state)
        if batch % 2 == 1:
            self.state.commit()


@hvd.elastic.run
def train(state):
    while state.epoch < EPOCHS:
        rank, size = hvd.rank(), hvd.size()
        indices = state.sampler.indices(rank, size, BATCH)
        if MODE == "loop":
            for start in range(0, len(indices), BATCH):
                batch = indices[start:start + BATCH]
                train_step(x[batch], y[batch])
                state.sampler.record_batch(BATCH, size)
                count_used(state, batch)
                report_step(state)
                if (start // BATCH) % 2 == 1:
                    state.commit()
        elif len(indices):
            model.fit(x[indices], y[indices], batch_size=BATCH, epochs=1, shuffle=False, verbose=0,
                      callbacks=[UpdateSamplerCallback(state, BATCH), _Progress(state, indices)])
        end_epoch(state)


train(state)
accuracy = float(np.mean(np.argmax(model.predict(x_test, verbose=0), -1) == y_test))
hvd.allreduce(np.zeros(1), name="end")  # every rank leaves together
print(f"DONE {NAME} {os.getpid()} " + json.dumps({"resets": resets, "accuracy": accuracy,
                                                  "used_per_epoch": state.used_per_epoch,
                                                  "generation": membership.generation().number}),
      flush=True)
