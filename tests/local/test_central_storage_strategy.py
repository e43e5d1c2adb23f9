"""tfx_dist.CentralStorageStrategy over 4 logical CPUs, parameters on a fifth device."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from local import strategy_checks as checks
from local.models import CPUS, digits, graph_op_types, seeds_model

# Compute on cpu:1..3, keep parameters on cpu:0: a distinct parameter device
# makes the placement assertions meaningful.
COMPUTE = CPUS[1:]
PARAMETERS = "/cpu:0"


@pytest.fixture
def strategy():
    return tfx_dist.CentralStorageStrategy(COMPUTE, parameter_device=PARAMETERS)


def _same_device(a: str, b: str) -> bool:
    return tf.DeviceSpec.from_string(a).device_index == tf.DeviceSpec.from_string(b).device_index


def test_is_a_tf_central_storage_strategy(strategy):
    assert isinstance(strategy, tf.distribute.experimental.CentralStorageStrategy)
    assert strategy.num_replicas_in_sync == 3
    assert _same_device(strategy.parameter_device, PARAMETERS)


def test_every_variable_and_slot_on_the_parameter_device(strategy):
    model = checks.fit_small(strategy)
    variables = list(model.variables) + list(model.optimizer.variables)
    assert len(variables) > 8  # weights, adam's slots and iteration count
    for variable in variables:
        assert _same_device(variable.value.device, PARAMETERS), (variable.path,
                                                                 variable.value.device)


def test_gradients_reduce_onto_the_parameter_device_in_one_op(strategy):
    step = checks.sgd_train_step(strategy, 3, 2)
    graph = step.get_concrete_function(tf.TensorSpec([3, 4])).graph
    fused = [op for op in graph.get_operations() if op.type == "TfxFusedReduce"]
    assert "TfxFusedReduce" in graph_op_types(step, tf.TensorSpec([3, 4]))
    for op in fused:
        assert _same_device(op.device, PARAMETERS), op.device
    # All four gradients (two kernels, two biases) go through one op.
    assert any(len(op.get_attr("Tout")) == 4 for op in fused), [op.get_attr("Tout") for op in fused]


@pytest.mark.smoke
def test_keras_fit_evaluate_predict(strategy):
    checks.fit_evaluate_predict(strategy)


def test_functional_model_with_dict_inputs(strategy):
    checks.functional_dict_inputs(strategy)


def test_custom_training_loop(strategy):
    checks.custom_training_loop(strategy, use_dataset_fn=False)


def test_reduce(strategy):
    n = strategy.num_replicas_in_sync
    per_replica = strategy.run(tf.function(lambda: tf.cast(
        tf.distribute.get_replica_context().replica_id_in_sync_group, tf.float32) + 1.0))
    assert float(strategy.reduce("SUM", per_replica, axis=None)) == n * (n + 1) / 2
    assert float(strategy.reduce("MEAN", per_replica, axis=None)) == (n + 1) / 2


def test_checkpoints_restore_under_every_strategy(strategy, tmp_path):
    checks.checkpoint_round_trip(strategy, tmp_path,
                                 restore_strategies=(tfx_dist.MirroredStrategy(CPUS[:2]),))


def test_checkpoint_from_mirrored_restores_here(strategy, tmp_path):
    model = checks.fit_small(tfx_dist.MirroredStrategy(CPUS[:2]))
    prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "mirrored"))
    with strategy.scope():
        fresh = seeds_model()
        tf.train.Checkpoint(model=fresh).restore(prefix).assert_existing_objects_matched()
    from local.models import max_abs_diff
    assert max_abs_diff(fresh.get_weights(), model.get_weights()) == 0.0


def test_agrees_with_tf_central_storage_strategy(tmp_path):
    # Same weights; TensorFlow's reports a wrong loss (see the test below).
    checks.agrees_with_tensorflow("tfx_central", "tf_central", tmp_path, same_loss=False)


@pytest.mark.parametrize("use_dataset_fn", [False, True], ids=["distribute_dataset", "dataset_fn"])
def test_replicas_read_directly_what_tf_deals_out(strategy, use_dataset_fn):
    ours, got = checks.dealt_out(strategy, use_dataset_fn, in_function=True)
    _, expected = checks.dealt_out(tf.distribute.experimental.CentralStorageStrategy(
        COMPUTE, parameter_device=PARAMETERS), use_dataset_fn, in_function=True)
    assert got == expected and len(got) == 4
    assert checks.reads_directly(ours)


def _fixed_model(weights=None):
    keras.utils.set_random_seed(0)
    model = seeds_model(dropout=0.0)
    model.compile(keras.optimizers.SGD(0.1), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    if weights is not None:
        model.set_weights(weights)
    return model


def test_evaluate_and_fit_history_match_a_single_device_run(strategy):
    # Keras 3's assign_add is assign(self + x): metric state kept as one
    # AggregatingVariable counted every earlier total once per replica.
    (x, y), _ = digits(1000)
    reference = _fixed_model()
    weights = reference.get_weights()
    with strategy.scope():
        model = _fixed_model(weights)
    np.testing.assert_allclose(model.evaluate(x, y, batch_size=60, verbose=0),
                               reference.evaluate(x, y, batch_size=60, verbose=0), rtol=1e-6)
    # 960 examples: whole batches of 20 per replica (uneven ones: docs/keras.md, known gaps).
    got = model.fit(x[:960], y[:960], batch_size=60, epochs=2, shuffle=False, verbose=0).history
    want = reference.fit(x[:960], y[:960], batch_size=60, epochs=2, shuffle=False,
                         verbose=0).history
    for key in ("loss", "accuracy"):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, err_msg=key)
