"""One rank of the same-members reset test (run under `tfx-dist-run -n 2`).

A custom loop and a `model.fit` train twice from the same start: once without
interruption, once through resets forced on every rank (workers-changed after a
commit: the state goes on from that commit; a lost peer a step after a commit:
the state rolls back to it and the step is redone). Reports the weights of
both runs, the generations and how often each function ran.
"""

import numpy as np
import tensorflow as tf
import keras

import tfx_dist.horovod as hvd
import tfx_dist.horovod.keras as hvd_keras
from tfx_dist import errors
from tfx_dist.elastic import membership
from workers import report

hvd.init()
rank, size = hvd.rank(), hvd.size()
rng = np.random.default_rng(7)
x_all = rng.normal(size=(96, 4)).astype(np.float32)
y_all = (x_all @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.1).astype(np.float32)


def make_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="tanh"),
                              keras.layers.Dense(1)])
    return model


def custom_loop(interrupt):
    model = make_model()
    opt = keras.optimizers.Adam(0.01)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((model(x, training=True) - y) ** 2)
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    step(x_all[:1], y_all[:1])  # builds the optimizer's slots, then every rank starts from rank 0's
    hvd.broadcast_variables(model.variables + opt.variables, 0)
    state = hvd.elastic.TensorFlowKerasState(model, opt, batch=0)
    forced = {"hosts": interrupt, "lost": interrupt}
    calls = []

    @hvd.elastic.run
    def train(state):
        calls.append(state.batch)
        while state.batch < 12:
            b = state.batch
            mine = slice(b * 8 + rank * 4, b * 8 + rank * 4 + 4)
            step(x_all[mine], y_all[mine])
            state.batch = b + 1
            if state.batch % 2 == 0:
                state.commit()
                if state.batch == 4 and forced["hosts"]:
                    forced["hosts"] = False
                    raise errors.HostsUpdatedInterrupt(skip_sync=False)
            elif state.batch == 7 and forced["lost"]:  # one step after the commit at 6
                forced["lost"] = False
                raise errors.PeerLostError("forced by the test: a peer lost at step 7")

    train(state)
    return [w.tolist() for w in model.get_weights()], calls, int(opt.iterations.numpy())


class _InterruptAfterEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.pending = True

    def on_epoch_end(self, epoch, logs=None):
        if self.pending and epoch == 0:  # after CommitStateCallback's commit of this epoch
            self.pending = False
            raise errors.HostsUpdatedInterrupt(skip_sync=False)


def keras_fit(interrupt):
    model = make_model()
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.05)), loss="mse")
    mine = np.arange(96)[rank::size]
    model.fit(x_all[mine][:8], y_all[mine][:8], batch_size=8, epochs=1, verbose=0, shuffle=False)
    hvd.broadcast_variables(model.variables + model.optimizer.variables, 0)
    state = hvd_keras.elastic.KerasState(model, batch=0, epoch=0)
    callbacks = [hvd_keras.elastic.UpdateEpochStateCallback(state),
                 hvd_keras.elastic.UpdateBatchStateCallback(state),
                 hvd_keras.elastic.CommitStateCallback(state, batches_per_commit=2)]
    if interrupt:
        callbacks.append(_InterruptAfterEpoch())
    fits = []

    @hvd_keras.elastic.run
    def train(state):
        fits.append(state.epoch)
        model.fit(x_all[mine], y_all[mine], batch_size=8, epochs=3 - state.epoch, verbose=0,
                  shuffle=False, callbacks=callbacks)

    train(state)
    return [w.tolist() for w in model.get_weights()], fits, state.epoch


plain_loop = custom_loop(interrupt=False)
elastic_loop = custom_loop(interrupt=True)
plain_fit = keras_fit(interrupt=False)
elastic_fit = keras_fit(interrupt=True)
report({"rank": rank, "size": size, "generation": membership.generation().number,
        "loop": [plain_loop, elastic_loop], "fit": [plain_fit, elastic_fit]})
