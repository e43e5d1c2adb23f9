"""tfx_dist.MultiWorkerMirroredStrategy in one process (no TF_CONFIG): a job of one worker."""

import numpy as np
import pytest
import tensorflow as tf
import keras

from tfx_dist.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy


@pytest.fixture()
def strategy(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    cpus = [d.name for d in tf.config.list_logical_devices("CPU")][:2]
    return MultiWorkerMirroredStrategy(devices=cpus)


def test_is_a_tensorflow_multi_worker_strategy(strategy):
    assert isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    assert isinstance(strategy, tf.distribute.Strategy)
    assert not strategy.extended._in_multi_worker_mode()
    assert strategy.extended.should_checkpoint
    assert strategy.num_replicas_in_sync == len(strategy.extended.worker_devices)
    assert strategy.cluster_info.rank == 0 and strategy.cluster_info.num_workers == 1


def test_reduce_accepts_nests_and_scalars_with_an_axis(strategy):
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(float(ctx.replica_id_in_sync_group + 1)))
    n = strategy.num_replicas_in_sync
    total = n * (n + 1) / 2
    assert float(strategy.reduce("SUM", per_replica, axis=0)) == total  # Keras passes axis=0
    nest = strategy.reduce("SUM", {"a": per_replica, "b": (per_replica,)}, axis=None)
    assert float(nest["a"]) == float(nest["b"][0]) == total


def test_keras_fit_evaluate_predict(strategy):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 4)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.1), "mse")
    history = model.fit(x, y, batch_size=16, epochs=3, verbose=0, validation_data=(x, y))
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert np.isfinite(model.evaluate(x, y, verbose=0))
    assert model.predict(x, batch_size=16, verbose=0).shape == (64, 1)


def test_refuses_ps_tasks():
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"worker": ["127.0.0.1:1", "127.0.0.1:2"], "ps": ["127.0.0.1:3"]}),
        task_type="ps", task_id=0)
    with pytest.raises(ValueError, match="ps"):
        MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def test_local_replicas_are_summed_by_the_fused_op(strategy):
    from local import strategy_checks

    strategy_checks.uses_fused_reduce(strategy)


def test_dropped_iterators_are_destroyed_in_the_background(strategy):
    from local import strategy_checks

    strategy_checks.drops_iterators_in_the_background(strategy)
