"""tfx_dist.horovod in one process: errors, settings, the schedule callback."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfx_dist.horovod as hvd
import tfx_dist.horovod.keras as hvd_keras
from tfx_dist.horovod import _env


@pytest.fixture
def initialized(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    hvd.init()
    yield
    hvd.shutdown()


@pytest.mark.parametrize("query", [hvd.size, hvd.rank, hvd.local_rank, hvd.cross_size,
                                   hvd.mpi_threads_supported])
def test_queries_before_init_raise_horovods_error(query):
    assert not hvd.is_initialized()
    with pytest.raises(ValueError, match=r"^Horovod has not been initialized; use hvd.init\(\).$"):
        query()


def test_init_refuses_communicators_and_process_sets():
    with pytest.raises(NotImplementedError, match="comm"):
        hvd.init(comm=[0, 1])


def test_single_process(initialized):
    assert (hvd.size(), hvd.rank(), hvd.local_size(), hvd.cross_size()) == (1, 0, 1, 1)
    hvd.init()  # a second init is a no-op, as in Horovod
    np.testing.assert_array_equal(hvd.allreduce(tf.constant([2.0, 4.0])), [2.0, 4.0])
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.allreduce(tf.constant([1.0]), op=hvd.Adasum)
    with pytest.raises(ValueError, match="supersedes"):
        hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, average=True)
    with pytest.raises(TypeError, match="Keras 3 optimizer"):
        hvd.DistributedOptimizer(object())


def test_horovod_settings_map_onto_tfx_settings():
    env = {"HOROVOD_FUSION_THRESHOLD": "1048576", "HOROVOD_CYCLE_TIME": "2.5"}
    assert _env.communicator_options(env) == {"fusion_bucket_bytes": 1 << 20,
                                              "cycle_time_ms": 2.5}
    # The tfx_dist variable wins over Horovod's.
    env["TFX_COMM_FUSION_BYTES"] = "4096"
    assert _env.communicator_options(env) == {"cycle_time_ms": 2.5}
    with pytest.raises(ValueError, match="HOROVOD_CYCLE_TIME"):
        _env.communicator_options({"HOROVOD_CYCLE_TIME": "fast"})
    assert _env.communicator_options({"HOROVOD_TIMELINE": "/tmp/t.json",
                                      "HOROVOD_TIMELINE_MARK_CYCLES": "1"}) == {
        "timeline": "/tmp/t.json", "timeline_mark_cycles": True}


def test_ignored_horovod_settings_are_reported_once(monkeypatch):
    monkeypatch.setenv("HOROVOD_AUTOTUNE", "1")
    monkeypatch.setenv("HOROVOD_STALL_CHECK_TIME_SECONDS", "30")
    monkeypatch.setattr(_env, "_reported", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _env.report_ignored(0)
        _env.report_ignored(0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 2, messages
    assert any("HOROVOD_AUTOTUNE" in m for m in messages)


def test_schedule_callback_staircase(initialized):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    schedule = hvd_keras.callbacks.LearningRateScheduleCallback(
        initial_lr=0.1, multiplier=lambda epoch: 0.5 ** epoch, start_epoch=1)
    history = model.fit(np.zeros((8, 2)), np.zeros((8, 1)), batch_size=4, epochs=3, verbose=0,
                        callbacks=[schedule])
    np.testing.assert_allclose(history.history["lr"], [0.1, 0.05, 0.025], rtol=1e-6)


def test_dropped_input_iterators_are_destroyed_off_the_training_thread(initialized, monkeypatch):
    """Keras makes a new input iterator every epoch (and for every evaluation) and drops the
    last one, as a custom loop's ``for batch in dataset`` does; destroying a tf.data iterator
    can stall its thread for up to a second in TF 2.21, and a stalled rank stalls every rank.
    After hvd.init() they die on tfx_dist's reaper thread."""
    import gc
    import threading
    import weakref

    from tfx_dist.input import iterator_reaper

    destroyed_on, watches = [], []
    make_iterator = tf.data.Dataset.__iter__

    def watched_iter(dataset):
        iterator = make_iterator(dataset)
        watches.append(weakref.ref(iterator._iterator_resource,
                                   lambda _: destroyed_on.append(threading.current_thread().name)))
        return iterator

    monkeypatch.setattr(tf.data.Dataset, "__iter__", watched_iter)
    x = np.random.default_rng(0).random((32, 4), dtype=np.float32)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.SGD(0.1)), loss="mse")
    model.fit(x, x[:, :1], batch_size=8, epochs=3, validation_data=(x, x[:, :1]), verbose=0)
    model.evaluate(x, x[:, :1], batch_size=8, verbose=0)
    dataset = tf.data.Dataset.from_tensor_slices(x).batch(8).prefetch(tf.data.AUTOTUNE)
    for _ in range(2):  # a custom loop's epochs
        for batch in dataset:
            model.train_on_batch(batch, batch[:, :1])
    gc.collect()
    assert iterator_reaper.wait_idle(10)
    # fit: one iterator per epoch plus the next epoch's, made ahead; validation and evaluate:
    # one each; the custom loop: one per epoch. All but the one fit still holds are garbage now.
    assert len(watches) >= 9
    assert destroyed_on and set(destroyed_on) == {"tfx_iterator_reaper"}, destroyed_on
