"""The checkpoint directory and the model-state files, in one process (no workers needed).

A half-written or damaged checkpoint is never loaded (the newest complete one is), the previous
checkpoint survives until the next one is complete, and a checkpoint of another model is refused
with an error naming the first variable that differs.
"""

import json
import os
import signal

import keras
import numpy as np
import pytest

from tfx_dist.errors import DataLossError
from tfx_dist.fault_tolerance import PREEMPTED_EXIT_CODE, dense_state
from tfx_dist.fault_tolerance.checkpoint_dir import CheckpointDir
from tfx_dist.fault_tolerance.notice import PreemptionNotice


def _save(directory, step, payload=b"x"):
    folder = directory.begin(step)
    with open(os.path.join(folder, "data.bin"), "wb") as f:
        f.write(payload * 100)
    return directory.commit(folder, step=step, epoch=0, step_in_epoch=step, num_workers=2)


def test_the_latest_complete_checkpoint_is_found_and_damaged_ones_are_skipped(tmp_path):
    directory = CheckpointDir(str(tmp_path / "ckpt"))
    assert directory.latest() is None
    for step in (1, 2, 3):
        _save(directory, step)
    assert sorted(os.listdir(directory.path)) == ["LATEST.json", "ckpt-2", "ckpt-3"]  # previous kept
    with open(os.path.join(directory.path, "LATEST.json")) as f:
        latest = json.load(f)
    assert {k: latest[k] for k in ("step", "path", "num_workers", "num_ps")} == {
        "step": 3, "path": "ckpt-3", "num_workers": 2, "num_ps": 0}
    assert directory.latest().step == 3
    # A writer killed before its rename leaves a temporary folder: never read.
    half = directory.begin(4)
    open(os.path.join(half, "data.bin"), "wb").close()
    assert directory.latest().step == 3
    # The newest checkpoint's file cut short: the previous one is used.
    with open(os.path.join(directory.path, "ckpt-3", "data.bin"), "r+b") as f:
        f.truncate(10)
    with pytest.raises(DataLossError, match="data.bin has 10 bytes"):
        directory.verify(os.path.join(directory.path, "ckpt-3"))
    assert directory.latest().step == 2
    # Same size, other bytes: the checksum says so.
    with open(os.path.join(directory.path, "ckpt-2", "data.bin"), "r+b") as f:
        f.write(b"y")
    assert directory.latest() is None
    # Writing again clears what interrupted writers left.
    _save(directory, 5)
    assert directory.latest().step == 5 and not [n for n in os.listdir(directory.path) if "tmp" in n]


def _model(width):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(width), keras.layers.Dropout(0.5),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.Adam(0.1), "mse")
    model.fit(np.ones((4, 3)), np.ones((4, 1)), verbose=0)
    return model


def test_a_checkpoint_of_another_model_is_refused_naming_the_variable(tmp_path):
    saved = _model(4)
    dense_state.save(dense_state.model_variables(saved), str(tmp_path))
    same = _model(4)
    dense_state.restore(dense_state.model_variables(same), str(tmp_path))
    for a, b in zip(dense_state.model_variables(saved), dense_state.model_variables(same)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # weights, slots, iterations, seed state
    with pytest.raises(dense_state.CheckpointMismatchError,
                       match=r"variable 0 is .*kernel \(3, 4\) float32 there, .*kernel \(3, 5\)"):
        dense_state.restore(dense_state.model_variables(_model(5)), str(tmp_path))
    other = _model(4)
    other.compile(keras.optimizers.SGD(0.1), "mse")
    other.fit(np.ones((4, 3)), np.ones((4, 1)), verbose=0)
    with pytest.raises(dense_state.CheckpointMismatchError, match="holds .* variables"):
        dense_state.restore(dense_state.model_variables(other), str(tmp_path))


def test_sigterm_is_noted_twice_without_harm_and_the_grace_period_is_bounded():
    assert PREEMPTED_EXIT_CODE == 75
    notice = PreemptionNotice(grace_s=60)
    notice.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        assert notice.received and notice.signal_name == "SIGTERM"
    finally:
        notice.uninstall()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with pytest.raises(ValueError, match="TFX_PREEMPTION_GRACE_S"):
        PreemptionNotice(grace_s=0)


def test_a_fit_stops_at_sigterm_with_75_and_refuses_another_global_batch(tmp_path):
    from tfx_dist.fault_tolerance.keras_callback import StepCheckpoint

    x = np.arange(48, dtype="float32").reshape(16, 3) / 48
    y = x.sum(axis=1, keepdims=True)

    class TermAfter(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 2:
                os.kill(os.getpid(), signal.SIGTERM)

    model = _model(4)
    with pytest.raises(SystemExit) as stop:
        model.fit(x, y, batch_size=4, epochs=2, shuffle=False, verbose=0,
                  callbacks=[TermAfter(), StepCheckpoint(str(tmp_path))])
    assert stop.value.code == PREEMPTED_EXIT_CODE
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL  # still noted until the exit
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    latest = CheckpointDir(str(tmp_path)).latest()
    assert (latest.epoch, latest.step_in_epoch, latest.extra["steps_per_epoch"]) == (0, 3, 4)
    with pytest.raises(dense_state.CheckpointMismatchError, match="epoch of 4 steps; this run's epochs "
                                                                  "have 2 steps"):
        _model(4).fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0,
                      callbacks=[StepCheckpoint(str(tmp_path))])
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _table_model(rows, width, names=("item_table",)):
    import tfx_dist

    inputs = keras.Input((2,), dtype="int64")
    embedded = [tfx_dist.layers.ShardedEmbedding(rows, width, combiner="mean", name=name)(inputs)
                for name in names]
    joined = embedded[0] if len(embedded) == 1 else keras.layers.Concatenate()(embedded)
    model = keras.Model(inputs, keras.layers.Dense(1)(joined))
    model.compile(keras.optimizers.Adagrad(0.3), "mse")
    model.fit(np.zeros((4, 2), "int64"), np.ones((4, 1)), verbose=0)
    return model


def test_a_checkpoint_of_another_table_layout_is_refused_naming_what_differs(tmp_path):
    from tfx_dist.fault_tolerance import table_state

    table_state.tables_of(_table_model(40, 4)).save(str(tmp_path), True, 0)
    table_state.tables_of(_table_model(40, 4)).restore(str(tmp_path))
    for model, what in ((_table_model(40, 8), r"written for dim 4, but table 'item_table' .* has 8"),
                        (_table_model(50, 4), r"num_rows .* 40, but table 'item_table' .* has 50"),
                        (_table_model(40, 4, ("item_table", "user_table")),
                         r"holds the ShardedEmbedding tables \['item_table'\]; this model has "
                         r"\['item_table', 'user_table'\]")):
        with pytest.raises(dense_state.CheckpointMismatchError, match=what):
            table_state.tables_of(model).restore(str(tmp_path))


_SLOW_WRITER = """
import os, sys, time
from tfx_dist.fault_tolerance.checkpoint_dir import CheckpointDir
from tfx_dist.fault_tolerance.notice import PreemptionNotice
directory = CheckpointDir(sys.argv[1])
for step in (1, 2):
    folder = directory.begin(step)
    with open(os.path.join(folder, "data.bin"), "wb") as f:
        f.write(bytes([step]) * 1000)
        if step == 2:  # half written, and the save outlasts the grace period
            PreemptionNotice(grace_s=0.5).install()
            f.flush()
            print("writing", flush=True)
            time.sleep(60)
    directory.commit(folder, step=step, epoch=0, step_in_epoch=step, num_workers=1)
"""


def test_a_sigterm_during_the_write_leaves_the_previous_checkpoint_usable(tmp_path):
    import subprocess
    import sys

    writer = subprocess.Popen([sys.executable, "-c", _SLOW_WRITER, str(tmp_path / "ckpt")],
                              stdout=subprocess.PIPE, text=True)
    assert writer.stdout.readline().strip() == "writing"
    writer.send_signal(signal.SIGTERM)
    writer.send_signal(signal.SIGTERM)  # twice: nothing changes
    assert writer.wait(timeout=30) == 128 + signal.SIGTERM  # the grace period ended the save
    directory = CheckpointDir(str(tmp_path / "ckpt"))
    latest = directory.latest()
    assert latest.step == 1
    directory.verify(latest.path)
    with open(os.path.join(latest.path, "data.bin"), "rb") as f:
        assert f.read() == bytes([1]) * 1000
    _save(directory, 2)  # the next save clears the interrupted one
    assert directory.latest().step == 2
    assert sorted(os.listdir(directory.path)) == ["LATEST.json", "ckpt-1", "ckpt-2"]


def test_shuffled_inputs_resume_in_the_uninterrupted_order_and_an_unseeded_reshuffle_is_warned_once(
        tmp_path):
    """NumPy arrays with shuffle=True (each epoch's order from the checkpoint's seed and the epoch)
    and a seeded reshuffling tf.data pipeline (the resume advances its seeds) end with the weights
    of the uninterrupted fit; an unseeded reshuffling pipeline resumes in another order, said once."""
    import json
    import subprocess
    import sys

    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "shuffled_resume.py")
    run = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True,
                         timeout=600, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    lines = [line for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    assert run.returncode == 0 and lines, run.stdout[-2000:] + run.stderr[-4000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert result["numpy"] < 1e-5 and result["seeded"] < 1e-5, result
    assert len(result["warnings"]) == 1 and "without a seed" in result["warnings"][0], result


def test_a_fit_without_a_strategy_saves_and_restores_the_optimizer_slots(tmp_path):
    # Keras builds the optimizer at the first step when no strategy does it first; the checkpoint's
    # list of variables is made before that, so it must build the slots itself or lose them.
    from tfx_dist.fault_tolerance import StepCheckpoint

    def fit(epochs):
        keras.utils.set_random_seed(3)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.Adam(0.1), "mse")
        x = np.random.RandomState(0).rand(16, 3).astype("float32")
        model.fit(x, x.sum(1, keepdims=True), batch_size=4, epochs=epochs, shuffle=False, verbose=0,
                  callbacks=[StepCheckpoint(str(tmp_path / "ckpt"), save_freq=2)])
        return model

    trained = fit(1)
    with open(os.path.join(tmp_path, "ckpt", "LATEST.json")) as f:
        latest = json.load(f)
    with open(os.path.join(tmp_path, "ckpt", latest["path"], dense_state.LAYOUT)) as f:
        saved = json.load(f)
    # kernel, bias + Adam's iterations, learning rate, two slots per weight
    assert len(saved) == 2 + 2 + 4, saved
    resumed = fit(1)  # resumes after the last step: the slots come back, nothing more is trained
    for a, b in zip(trained.optimizer.variables, resumed.optimizer.variables):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
