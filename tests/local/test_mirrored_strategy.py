"""tfx_dist.MirroredStrategy over 4 logical CPUs: Keras, custom loops, checkpoints."""

import contextlib

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from local import strategy_checks as checks
from local.models import CPUS


@pytest.fixture
def strategy():
    return tfx_dist.MirroredStrategy(CPUS)


def test_is_a_tf_mirrored_strategy(strategy):
    assert isinstance(strategy, tf.distribute.MirroredStrategy)
    assert strategy.num_replicas_in_sync == 4
    assert isinstance(strategy.extended._get_cross_device_ops(None), tfx_dist.FusedAllReduce)


def test_dropped_iterators_are_destroyed_in_the_background(strategy):
    checks.drops_iterators_in_the_background(strategy)


@pytest.mark.smoke
def test_keras_fit_evaluate_predict():
    # Two replicas: 11 steps an epoch at the seeds' batch of 64 per replica.
    strategy = tfx_dist.MirroredStrategy(CPUS[:2])
    model = checks.fit_evaluate_predict(strategy)
    for variable in model.trainable_variables:
        copies = strategy.experimental_local_results(variable.value)
        assert len(copies) == 2
        assert copies[0].device != copies[1].device
        np.testing.assert_array_equal(copies[0].numpy(), copies[1].numpy())


def test_functional_model_with_dict_inputs(strategy):
    checks.functional_dict_inputs(strategy)


@pytest.mark.parametrize("use_dataset_fn", [False, True], ids=["distribute_dataset", "dataset_fn"])
def test_custom_training_loop(strategy, use_dataset_fn):
    checks.custom_training_loop(strategy, use_dataset_fn)


def test_reduce_and_gather(strategy):
    checks.reduce_and_gather(strategy)


def test_sparse_gradients(strategy):
    checks.sparse_gradients(strategy)


def test_gradients_run_on_fused_reduce(strategy):
    checks.uses_fused_reduce(strategy)


@pytest.mark.smoke
def test_checkpoint_round_trip(strategy, tmp_path):
    checks.checkpoint_round_trip(strategy, tmp_path)


def test_agrees_with_tf_mirrored_strategy(tmp_path):
    checks.agrees_with_tensorflow("tfx_mirrored", "tf_mirrored", tmp_path)


@pytest.mark.parametrize("in_function", [False, True], ids=["eager", "tf_function"])
@pytest.mark.parametrize("use_dataset_fn", [False, True], ids=["distribute_dataset", "dataset_fn"])
def test_cpu_replicas_read_directly_what_tf_deals_out(use_dataset_fn, in_function):
    # Three replicas split a batch of 7 unevenly; the last batches leave replicas empty.
    ours, got = checks.dealt_out(tfx_dist.MirroredStrategy(CPUS[:3]), use_dataset_fn,
                                 in_function)
    _, expected = checks.dealt_out(tf.distribute.MirroredStrategy(CPUS[:3]), use_dataset_fn,
                                   in_function)
    assert got == expected
    assert len(got) == 4 and sorted(sum(sum(got, []), [])) == list(range(23))
    assert checks.reads_directly(ours)


def test_fit_with_steps_per_execution_and_partial_batches():
    # Several steps per call read the input with get_next_as_optional inside a
    # while loop; 1000 examples in batches of 96 leave a partial last batch that
    # three replicas split unevenly. TensorFlow's own strategy fails on this with
    # steps_per_execution > 1 (Keras 3), and weighs the replicas of the partial
    # batch equally (its losses are 1e-4 off): compare with one device.
    rng = np.random.default_rng(0)
    x = rng.random((1000, 8), dtype=np.float32)
    y = (x.sum(axis=1) > 4).astype("int32")
    results = []
    for strategy, steps_per_execution in ((tfx_dist.MirroredStrategy(CPUS[:3]), 4), (None, 1)):
        keras.utils.set_random_seed(0)
        with strategy.scope() if strategy else contextlib.nullcontext():
            model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                      keras.layers.Dense(2, activation="softmax")])
            model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"],
                          steps_per_execution=steps_per_execution)
        history = model.fit(x, y, batch_size=96, epochs=3, verbose=0)
        results.append((history.history["loss"], model.evaluate(x, y, batch_size=96, verbose=0),
                        model.predict(x, batch_size=96, verbose=0)))
    (ours_loss, ours_eval, ours_pred), (one_loss, one_eval, one_pred) = results
    assert ours_loss[-1] < ours_loss[0]
    np.testing.assert_allclose(ours_loss, one_loss, rtol=1e-5)
    np.testing.assert_allclose(ours_eval, one_eval, rtol=1e-5)
    np.testing.assert_allclose(ours_pred, one_pred, rtol=1e-5, atol=1e-6)


def test_cpu_replicas_read_ragged_and_sparse_elements_as_tf_does():
    ragged = tf.ragged.constant([[1], [2, 3], [4, 5, 6], [7], [8, 9]] * 2)
    sparse = tf.sparse.from_dense(tf.reshape(tf.range(20), [10, 2]) % 3)
    data = tf.data.Dataset.from_tensor_slices({"r": ragged, "s": sparse}).batch(4)

    def sums(strategy):
        @tf.function
        def step(x):
            return strategy.run(lambda v: (tf.reduce_sum(v["r"].flat_values),
                                           tf.sparse.reduce_sum(v["s"])), args=(x,))
        out = []
        for x in strategy.experimental_distribute_dataset(data):
            out.append([int(t) for value in step(x)
                        for t in strategy.experimental_local_results(value)])
        return out

    ours = sums(tfx_dist.MirroredStrategy(CPUS[:2]))
    assert ours == sums(tf.distribute.MirroredStrategy(CPUS[:2]))
    assert sum(row[0] + row[1] for row in ours) == sum(range(1, 10)) * 2
