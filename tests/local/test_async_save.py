"""Asynchronous step checkpoints, in one process: the step goes on while the write runs, the
checkpoint holds the state of its step (not a later one), and a rerun resumes from it exactly."""

import time

import keras
import numpy as np

from tfx_dist.fault_tolerance import dense_state
from tfx_dist.fault_tolerance.async_save import AsyncStepCheckpoint
from tfx_dist.fault_tolerance.keras_callback import StepCheckpoint

SLOW_WRITE_S = 1.0


def _model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.01), "mse")
    # Built now: in one process without a strategy Keras builds the slots at the first step, after
    # the callback listed the variables to save.
    model.optimizer.build(model.trainable_variables)
    return model


class _StateAt(keras.callbacks.Callback):
    """The model's state (weights, slots, step) after each step, as the checkpoint would hold it."""

    def __init__(self):
        super().__init__()
        self.states = {}

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        self.states[step] = [np.array(v.numpy()) for v in dense_state.model_variables(self.model)]


def test_async_saves_return_before_the_write_and_resume_exactly(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(80, 4)).astype("float32"), rng.normal(size=(80, 1)).astype("float32")
    write = dense_state.save

    def slow_disk(variables, folder):
        time.sleep(SLOW_WRITE_S)
        write(variables, folder)

    monkeypatch.setattr(dense_state, "save", slow_disk)
    model, state = _model(), _StateAt()
    checkpoint = AsyncStepCheckpoint(str(tmp_path / "ckpt"), save_freq=4)
    save, save_s = checkpoint._save, []

    def timed_save(*args):
        start = time.perf_counter()
        save(*args)
        save_s.append(time.perf_counter() - start)

    checkpoint._save = timed_save
    model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[checkpoint, state])
    # Step 4's save returned long before its write ended (a synchronous one takes SLOW_WRITE_S);
    # step 8's waited for it (one write in flight at most); fit's end waited for step 8's.
    assert save_s[0] < SLOW_WRITE_S / 2, save_s
    latest = checkpoint._directory.latest()
    assert latest.step == 8 and latest.step_in_epoch == 8
    for step in (4, 8):  # each checkpoint holds its own step's values, though training went on
        with np.load(tmp_path / "ckpt" / f"ckpt-{step}" / "dense.npz") as saved:
            for i, expected in enumerate(state.states[step]):
                np.testing.assert_array_equal(saved[f"v{i}"], expected)
    monkeypatch.setattr(dense_state, "save", write)

    # A rerun (synchronous callback) resumes at step 9 and ends with the uninterrupted weights.
    rerun = _model()
    rerun.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0,
              callbacks=[StepCheckpoint(str(tmp_path / "ckpt"), save_freq=4)])
    assert int(rerun.optimizer.iterations.numpy()) == 10
    for a, b in zip(rerun.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
