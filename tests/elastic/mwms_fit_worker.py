"""A worker of an elastic job on tfx_dist.MultiWorkerMirroredStrategy, run by tfx-dist-run --elastic.

ELASTIC_MODE=fit: `model.fit` (one epoch per call) inside `tfx_dist.elastic.run`; loop: a custom
loop of `strategy.run` steps. The state (`KerasState`) holds the model, the optimizer, an
`ElasticSampler` (the data position) and the trace of the steps that count: (epoch, position,
workers) for each, committed with the weights, so a rollback drops the steps it undoes. Each
worker reads its share of what is left of the epoch through `distribute_datasets_from_function`
(its rank and number of workers from the input context: the strategy's after each reset).

Checks written in the DONE line: how often each example was used in each epoch (summed over the
ranks each step), the accuracy on held-out data, and, on rank 0, two one-process references from
the same first weights: the replay of the committed steps (the same global batches: the weights
must match) and the uninterrupted run (3 workers throughout: its accuracy). In the last epoch rank 1
alone sees a faked driver's notice (ELASTIC_FAKE_NOTICE=0: not): every rank must reset at that
commit. Prints "STEP <worker>
<pid> <generation> <rank> <size> <step>" and "DONE <worker> <pid> <json>" (see elastic_job.py).
"""

import json
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

import elastic_fit  # noqa: E402
import tfx_dist  # noqa: E402
from elastic_fit import global_batches, size_and_rank  # noqa: E402
from tfx_dist.elastic import (CommitStateCallback, ElasticSampler, KerasState,  # noqa: E402
                              UpdateSamplerCallback, membership, run)

MODE = os.environ.get("ELASTIC_MODE", "fit")
NAME = os.environ["TFX_ELASTIC_WORKER"]
FULL_SIZE = int(os.environ.get("ELASTIC_FULL_SIZE", "3"))
COMMIT = int(os.environ.get("ELASTIC_COMMIT", "2"))
EPOCHS, BATCH, N, LR = 3, 16, 960, 0.1

rng = np.random.default_rng(0)
labels = rng.integers(0, 4, N + 400)
x_all = (rng.normal(size=(N + 400, 16)) + 2.0 * np.eye(16)[labels * 4]).astype(np.float32)
x, y, x_test, y_test = x_all[:N], labels[:N], x_all[N:], labels[N:]


TRACES = elastic_fit.TRACES
Model = elastic_fit.counting_traces(keras.Sequential)


def make_model():
    model = Model([keras.Input((16,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(LR),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


strategy = tfx_dist.MultiWorkerMirroredStrategy()
with strategy.scope():
    keras.utils.set_random_seed(1)
    model = make_model()
state = KerasState(model, epoch=0, step=0, sampler=ElasticSampler(N, seed=5), used=np.zeros(N, np.float32),
                   used_per_epoch=[], trace=[])
resets, initial = [], []
state.register_reset_callbacks([lambda: resets.append(list(membership.generation().joined))])

if os.environ.get("ELASTIC_FAKE_NOTICE", "1") == "1":
    elastic_fit.fake_a_notice_on_rank_1(state, EPOCHS - 1)


def after_step(state, mine):
    """One step of the job done: its trace, the data position, the examples used, a STEP line."""
    size, rank = size_and_rank()
    state.trace.append([state.sampler.epoch, state.sampler.processed, size])
    counts = np.bincount(mine, minlength=N).astype(np.float32)
    (total,) = membership.communicator().allreduce_numpy([counts], name="used")
    state.used += total
    state.step += 1
    print(f"STEP {NAME} {os.getpid()} {membership.generation().number} {rank} {size} {state.step}",
          flush=True)


class _Progress(keras.callbacks.Callback):
    """Before UpdateSamplerCallback (the trace records the position before the step)."""

    def __init__(self, indices):
        super().__init__()
        self.indices = indices

    def on_train_batch_end(self, batch, logs=None):
        after_step(state, self.indices[batch * BATCH:(batch + 1) * BATCH])


def this_workers_dataset(context):
    """This worker's share of the rest of the epoch, per the strategy's input context."""
    assert (context.num_input_pipelines, context.input_pipeline_id) == size_and_rank(), context
    indices = state.sampler.indices(context.input_pipeline_id, context.num_input_pipelines, BATCH)
    return tf.data.Dataset.from_tensor_slices((x[indices], y[indices])).batch(BATCH)


def fit_epoch(state):
    size, rank = size_and_rank()
    indices = state.sampler.indices(rank, size, BATCH)
    steps = state.sampler.steps(BATCH, size)
    if steps:
        dataset = strategy.distribute_datasets_from_function(this_workers_dataset)
        model.fit(dataset, epochs=1, steps_per_epoch=steps, verbose=0,
                  callbacks=[_Progress(indices), UpdateSamplerCallback(state, BATCH),
                             CommitStateCallback(state, batches_per_commit=COMMIT)])


_step_fn = {}


def loop_epoch(state):
    size, rank = size_and_rank()
    indices = state.sampler.indices(rank, size, BATCH)
    if "fn" not in _step_fn:  # made once: a reset drops its traces (it traces again, once)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(
            from_logits=True, reduction="sum")

        @tf.function
        def step(iterator, rows):
            def replica(xb, yb):
                TRACES[0] += 1
                with tf.GradientTape() as tape:
                    loss = loss_fn(yb, model(xb, training=True)) / tf.cast(rows, tf.float32)
                grads = tape.gradient(loss, model.trainable_variables)
                model.optimizer.apply_gradients(zip(grads, model.trainable_variables))
            strategy.run(replica, args=next(iterator))
        _step_fn["fn"] = step
    dataset = strategy.distribute_datasets_from_function(this_workers_dataset)
    iterator = iter(dataset)
    for start in range(0, len(indices), BATCH):
        mine = indices[start:start + BATCH]
        _step_fn["fn"](iterator, tf.constant(len(mine) * size))  # a mean over the global batch's rows
        after_step(state, mine)
        state.sampler.record_batch(BATCH, size)
        if state.step % COMMIT == 0:
            state.commit()


@run
def train(state):
    if not initial:  # after the first sync: rank 0's weights, on every rank
        initial.extend(w.copy() for w in model.get_weights())
    while state.epoch < EPOCHS:
        (fit_epoch if MODE == "fit" else loop_epoch)(state)
        state.used_per_epoch.append([float(state.used.min()), float(state.used.max())])
        state.used = np.zeros(N, np.float32)
        elastic_fit.end_epoch(state, FULL_SIZE)


def accuracy(m):
    return float(np.mean(np.argmax(m(x_test, training=False).numpy(), -1) == y_test))


def replay(trace):
    """One process, plain Keras, from the first weights: a step on each global batch of ``trace``."""
    reference = make_model()
    reference.set_weights(initial)
    for _, rows in global_batches(trace, N, BATCH):
        reference.train_on_batch(x[rows], y[rows])
    return reference


train(state)
membership.communicator().allreduce_numpy([np.zeros(1)], name="end")  # every rank leaves together
out = {"resets": resets, "accuracy": accuracy(model), "used_per_epoch": state.used_per_epoch,
       "generation": membership.generation().number, "steps": len(state.trace),
       "traces": TRACES[0], "sizes": sorted({s for _, _, s in state.trace})}
if size_and_rank()[1] == 0:
    replayed = replay(state.trace)  # made outside the strategy's scope: one process
    out["replay_error"] = max(float(np.max(np.abs(a - b)))
                              for a, b in zip(model.get_weights(), replayed.get_weights()))
    uninterrupted = elastic_fit.uninterrupted_trace(FULL_SIZE, EPOCHS, N, BATCH)
    out["uninterrupted_accuracy"] = accuracy(replay(uninterrupted))
print(f"DONE {NAME} {os.getpid()} " + json.dumps(out), flush=True)
