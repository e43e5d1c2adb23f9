"""`model.fit` under an elastic tfx_dist.ParameterServerStrategy, run by
`tfx-dist-run --elastic --ps 1` (on the ps task the strategy serves, then exits).

The model: a `ShardedEmbedding` table on the server (two ids per example, mean, zeros at first)
under dense layers on the workers. `fit` runs one epoch per call inside `tfx_dist.elastic.run`,
each worker on its share of what is left of the epoch (an `ElasticSampler` in a `KerasState`,
read through the strategy's input context), committing after every step: the server's rows are
not rolled back, so a commit after every step keeps them and the restored state in agreement. The
state also keeps the trace of the steps that count: (epoch, position, workers) for each.

Worker w1 kills itself with SIGKILL mid-epoch, in its all-reduce of Keras's logs (DIE_AT).
Checks written in the DONE line: how often each example was used in each epoch (by the global
batches of the committed steps, which the replay below confirms), the training step's traces, the
accuracy on held-out data, and, on rank 0, two one-process references from the same first weights
(a local table, zeros at first): the replay of the committed steps (the same global batches: the
dense weights and the table's rows must match) and the uninterrupted run (3 workers throughout: its
accuracy). In the last epoch rank 1 alone sees a faked driver's notice: every rank resets at that
commit, and reconnects to the server.
Prints "STEP <worker> <pid> <generation> <rank> <size> <step>" and "DONE <worker> <pid> <json>"
(see elastic_job.py).
"""

import json
import os
import signal
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

NAME = os.environ.get("TFX_ELASTIC_WORKER", "?")
FULL_SIZE = 3
EPOCHS, BATCH, N, ROWS, LR = 3, 16, 960, 40, 0.5

rng = np.random.default_rng(0)
ids_all = rng.integers(0, ROWS, (N + 400, 2)).astype(np.int64)
labels_all = ids_all[:, 0] % 4  # the first id's class; the second id is noise
x, y, x_test, y_test = ids_all[:N], labels_all[:N], ids_all[N:], labels_all[N:]

strategy = tfx_dist.ParameterServerStrategy()  # on the ps task: serves every generation, then exits

TRACES = elastic_fit.TRACES
Model = elastic_fit.counting_traces(keras.Model)


def make_model():
    inputs = keras.Input((2,), dtype="int64")
    hidden = tfx_dist.layers.ShardedEmbedding(ROWS, 8, combiner="mean", embeddings_initializer="zeros",
                                              name="items")(inputs)
    hidden = keras.layers.Dense(16, activation="tanh",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=3))(hidden)
    model = Model(inputs, keras.layers.Dense(4, kernel_initializer=keras.initializers.GlorotUniform(seed=7))(
        hidden))
    model.compile(optimizer=keras.optimizers.SGD(LR),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.optimizer.build(model.trainable_variables)
    return model


with strategy.scope():
    model = make_model()
state = KerasState(model, epoch=0, step=0, sampler=ElasticSampler(N, seed=elastic_fit.SEED), trace=[])
resets, initial = [], []
state.register_reset_callbacks([lambda: resets.append(list(membership.generation().joined))])

elastic_fit.fake_a_notice_on_rank_1(state, EPOCHS - 1)


class _Progress(keras.callbacks.Callback):
    """Before UpdateSamplerCallback (the trace records the position before the step). No collective
    here: between a step's end on the server and its commit, a failure would roll back a step that
    the server applied (CommitStateCallback's commit is the step's)."""

    def on_train_batch_end(self, batch, logs=None):
        size, rank = size_and_rank()
        state.trace.append([state.sampler.epoch, state.sampler.processed, size])
        state.step += 1
        print(f"STEP {NAME} {os.getpid()} {membership.generation().number} {rank} {size} {state.step}",
              flush=True)


# w1 kills itself with SIGKILL in its step DIE_AT + 1, where Keras reduces the step's logs across
# the workers (its `strategy.reduce("MEAN", log, axis=0)`; the other reduces, of the input pipeline
# and of metrics, are left alone). With that all-reduce after the step's end on the server, the
# server would apply the step and the survivors, failing in the all-reduce, roll back before it
# and run it again: its table update twice.
DIE_AT = 10


def _die_in_this_step():
    if state.step == DIE_AT and membership.generation().number == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return 0


if NAME == "w1":
    _reduce, _ordered = strategy.reduce, {}  # id(log) -> the log, once it waits for the death check

    def _reduce_or_die(reduce_op, value, axis=None):
        if getattr(reduce_op, "value", reduce_op) != "MEAN" or axis != 0 or id(value) in _ordered:
            return _reduce(reduce_op, value, axis)  # (a log asked again: as the first time)
        _ordered[id(value)] = value
        die = tf.py_function(_die_in_this_step, [], tf.int32)  # stateful: after the ops made before it
        with tf.control_dependencies([die]):  # the all-reduce after the check (not before, unordered)
            return _reduce(reduce_op, tf.nest.map_structure(tf.identity, value), axis)

    strategy.reduce = _reduce_or_die


def this_workers_dataset(context):
    """This worker's share of the rest of the epoch, per the strategy's input context."""
    assert (context.num_input_pipelines, context.input_pipeline_id) == size_and_rank(), context
    indices = state.sampler.indices(context.input_pipeline_id, context.num_input_pipelines, BATCH)
    return tf.data.Dataset.from_tensor_slices((x[indices], y[indices])).batch(BATCH)


@run
def train(state):
    if not initial:  # after the first sync: rank 0's dense weights, on every rank
        initial.extend(w.copy() for w in dense_weights(model))
    while state.epoch < EPOCHS:
        size, rank = size_and_rank()
        steps = state.sampler.steps(BATCH, size)
        if steps:
            model.fit(strategy.distribute_datasets_from_function(this_workers_dataset), epochs=1,
                      steps_per_epoch=steps, verbose=0,
                      callbacks=[_Progress(), UpdateSamplerCallback(state, BATCH),
                                 CommitStateCallback(state, batches_per_commit=1)])
        elastic_fit.end_epoch(state, FULL_SIZE)


def dense_layers(m):
    return [layer for layer in m.layers if layer.name != "items" and layer.weights]


def dense_weights(m):
    return [w for layer in dense_layers(m) for w in layer.get_weights()]


def weights_per_layer(flat):
    return [flat[0:2], flat[2:4]]  # two Dense layers: kernel, bias each


def accuracy(m):
    return float(np.mean(np.argmax(m.predict(x_test, batch_size=400, verbose=0), -1) == y_test))


def table_rows(m):
    """Every row of the model's table (the mean of an id with itself is its row)."""
    every = np.repeat(np.arange(ROWS, dtype=np.int64)[:, None], 2, axis=1)
    return m.get_layer("items")(tf.constant(every)).numpy()


def replay(trace):
    """One process, plain Keras and a local table, from the first weights: a step on each global
    batch of ``trace``."""
    reference = make_model()
    for layer, values in zip(dense_layers(reference), weights_per_layer(initial)):
        layer.set_weights(values)  # the table: zeros, as on the server at first
    for _, rows in global_batches(trace, N, BATCH):
        reference.train_on_batch(x[rows], y[rows])
    return reference


train(state)
membership.communicator().allreduce_numpy([np.zeros(1)], name="end")  # every rank leaves together
out = {"resets": resets, "accuracy": accuracy(model),
       "used_per_epoch": elastic_fit.used_per_epoch(state.trace, EPOCHS, N, BATCH),
       "generation": membership.generation().number, "steps": len(state.trace), "traces": TRACES[0],
       "sizes": sorted({s for _, _, s in state.trace})}
if size_and_rank()[1] == 0:
    rows = table_rows(model)
    replayed = replay(state.trace)  # made outside the strategy's scope: one process, a local table
    out["replay_error"] = max(float(np.max(np.abs(a - b)))
                              for a, b in zip(dense_weights(model), dense_weights(replayed)))
    out["rows_error"] = float(np.max(np.abs(rows - table_rows(replayed))))
    out["rows_moved"] = float(np.max(np.abs(rows)))
    uninterrupted = elastic_fit.uninterrupted_trace(FULL_SIZE, EPOCHS, N, BATCH)
    out["uninterrupted_accuracy"] = accuracy(replay(uninterrupted))
print(f"DONE {NAME} {os.getpid()} " + json.dumps(out), flush=True)
