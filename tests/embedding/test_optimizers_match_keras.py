"""The store's optimizers equal Keras 3's: the same table trained both ways.

Keras's optimizer updates a dense ``keras.Variable`` with the dense form of
each step's sparse gradient (``np.add.at``); the store applies the sparse
gradient to the same rows split over two ``TableShard``s. Every step's ids
cover every row (some twice or more), since a dense optimizer also moves rows
whose gradient is 0 and the store's updates are lazy.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tfx_dist.embedding import store

ROWS, DIM, SHARDS, STEPS = 50, 8, 2, 6
# Relative to each element, or to the largest element of its array: FTRL's
# linear slot sums terms of order 10, so a last-bit difference between
# TensorFlow's float32 ops and the C++ loop (source not pinned down: seen with
# sqrt and with powf alike) reaches its small elements at order 1e-6 (seen:
# 2e-6 on a 0.0026 element, 2e-7 of the array's largest).
RTOL, SCALE_TOL = 1e-5, 1e-6


def _assert_close(actual, desired, message):
    atol = SCALE_TOL * float(np.abs(desired).max())
    np.testing.assert_allclose(actual, desired, rtol=RTOL, atol=atol, err_msg=message)


def _keras_slots(opt, variable) -> list:
    """Keras's slot variables of ``variable`` in the store's record order (see optimizers.h)."""
    name = type(opt).__name__
    groups = {
        "SGD": ["momentums"], "Adagrad": ["_accumulators"],
        "Adam": ["_momentums", "_velocities", "_velocity_hats"],
        "AdamW": ["_momentums", "_velocities", "_velocity_hats"],
        "RMSprop": ["_velocities", "_momentums", "_average_gradients"], "Lion": ["_momentums"],
        "Adamax": ["_m", "_u"], "Adadelta": ["_accumulated_grads", "_accumulated_delta_vars"],
        "Nadam": ["_momentums", "_velocities"], "Ftrl": ["_accumulators", "_linears"],
    }[name]
    index = opt._get_variable_index(variable)
    return [slots[index] for group in groups for slots in [getattr(opt, group, None) or []]
            if slots and slots[index] is not None]


def _shards(rule, num_shards=SHARDS):
    return [store.TableShard(DIM, ROWS, shard_index=s, num_shards=num_shards, name="match", seed=7,
                             optimizer=rule)
            for s in range(num_shards)]


def _apply(shards, ids, grads, lr, step):
    mine = store.shard_of(ids, len(shards), dynamic=False)
    for s, shard in enumerate(shards):
        shard.apply_gradients(ids[mine == s], grads[mine == s], learning_rate=lr, step=step)


def _records(shards):
    """Every row's record, shape (rows, 1 + slots, dim)."""
    owner = store.shard_of(np.arange(ROWS), len(shards), dynamic=False)
    return np.stack([shards[owner[i]].read_record(i) for i in range(ROWS)])


def _train_both(keras_opt, learning_rates, seed=0, steps_before=0):
    """Trains Keras's optimizer and the store's copy of it on the same gradients; returns the
    store's records, Keras's (value, slots...) and the initial values. ``steps_before``: steps
    Keras's optimizer took on another variable first (the store is told the step count)."""
    rule = store.optimizer_from_keras(keras_opt)
    shards = _shards(rule)
    all_ids = np.arange(ROWS)
    owner = store.shard_of(all_ids, SHARDS, dynamic=False)
    initial = np.empty((ROWS, DIM), np.float32)
    for s, shard in enumerate(shards):
        initial[owner == s] = shard.lookup(all_ids[owner == s])
    var = keras.Variable(initial, dtype="float32")
    if steps_before:
        _advance(keras_opt, steps_before, var)
    rng = np.random.default_rng(seed)
    for step, lr in enumerate(learning_rates, start=1 + steps_before):
        ids = np.concatenate([rng.permutation(ROWS), rng.integers(0, ROWS, 20)])
        grads = rng.normal(0, 1, (len(ids), DIM)).astype(np.float32)
        dense = np.zeros((ROWS, DIM), np.float32)
        np.add.at(dense, ids, grads)
        keras_opt.learning_rate = lr
        keras_opt.apply([dense], [var])
        _apply(shards, ids, grads, lr, step)
    records = _records(shards)
    expected = [var.numpy()] + [np.asarray(v.numpy()) for v in _keras_slots(keras_opt, var)]
    return records, expected, initial


CASES = {
    "sgd": lambda: keras.optimizers.SGD(),
    "sgd_momentum": lambda: keras.optimizers.SGD(momentum=0.9),
    "sgd_nesterov": lambda: keras.optimizers.SGD(momentum=0.8, nesterov=True),
    "adagrad": lambda: keras.optimizers.Adagrad(initial_accumulator_value=0.2, epsilon=1e-6),
    "adam": lambda: keras.optimizers.Adam(beta_1=0.8, beta_2=0.95),
    "adam_amsgrad": lambda: keras.optimizers.Adam(amsgrad=True),
    "ftrl": lambda: keras.optimizers.Ftrl(l1_regularization_strength=0.01, l2_regularization_strength=0.02,
                                          l2_shrinkage_regularization_strength=0.03, beta=0.1),
    "ftrl_power": lambda: keras.optimizers.Ftrl(learning_rate_power=-0.7, l1_regularization_strength=0.2),
    "rmsprop": lambda: keras.optimizers.RMSprop(rho=0.8),
    "rmsprop_momentum": lambda: keras.optimizers.RMSprop(momentum=0.5, epsilon=1e-6),
    "rmsprop_centered": lambda: keras.optimizers.RMSprop(centered=True),
    "rmsprop_momentum_centered": lambda: keras.optimizers.RMSprop(rho=0.7, momentum=0.9, centered=True),
    # Keras's decoupled weight decay: AdamW (Adam with it) and the argument of every optimizer.
    "adamw": lambda: keras.optimizers.AdamW(weight_decay=0.5),
    "sgd_momentum_weight_decay": lambda: keras.optimizers.SGD(momentum=0.9, weight_decay=0.3),
    "adagrad_weight_decay": lambda: keras.optimizers.Adagrad(weight_decay=0.2),
    "ftrl_weight_decay": lambda: keras.optimizers.Ftrl(l1_regularization_strength=0.01, weight_decay=0.2),
    "rmsprop_weight_decay": lambda: keras.optimizers.RMSprop(momentum=0.5, centered=True, weight_decay=0.4),
    "lion": lambda: keras.optimizers.Lion(beta_1=0.8),
    "lion_weight_decay": lambda: keras.optimizers.Lion(beta_2=0.95, weight_decay=0.2),
    "adamax": lambda: keras.optimizers.Adamax(),
    "adamax_weight_decay": lambda: keras.optimizers.Adamax(beta_2=0.99, weight_decay=0.3),
    "adadelta": lambda: keras.optimizers.Adadelta(rho=0.9, epsilon=1e-2),  # larger steps: trains in 6
    "adadelta_weight_decay": lambda: keras.optimizers.Adadelta(epsilon=1e-3, weight_decay=0.4),
    "nadam": lambda: keras.optimizers.Nadam(),
    "nadam_weight_decay": lambda: keras.optimizers.Nadam(beta_1=0.8, beta_2=0.95, weight_decay=0.3),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_keras(case):
    records, expected, initial = _train_both(CASES[case](), [0.05] * STEPS)
    assert records.shape[1] == len(expected), "slot count differs from Keras's"
    for k, want in enumerate(expected):
        what = "values" if k == 0 else f"slot {k}"
        _assert_close(records[:, k, :], want, f"{case}: {what}")
    assert np.abs(records[:, 0, :] - initial).max() > 1e-3, "nothing trained"


@pytest.mark.parametrize("case", ["sgd_momentum", "adagrad", "adam", "ftrl", "rmsprop_momentum_centered",
                                  "adamw", "adamax_weight_decay", "adadelta", "lion", "nadam"])
def test_learning_rate_changing_per_step(case):
    records, expected, _ = _train_both(CASES[case](), [0.1, 0.05, 0.02, 0.08, 0.01, 0.03], seed=1)
    for k, want in enumerate(expected):
        _assert_close(records[:, k, :], want, f"{case}: slot {k}")


def _advance(keras_opt, steps, like):
    """Has Keras's optimizer take ``steps`` steps on another variable (its step count and
    Nadam's schedule product move on; ``like``'s slots do not)."""
    other = keras.Variable(np.zeros(like.shape, np.float32))
    keras_opt.build([like, other])
    for _ in range(steps):
        keras_opt.apply([np.zeros(like.shape, np.float32)], [other])


@pytest.mark.parametrize("case", ["nadam_weight_decay", "adamax"])
def test_late_steps_use_the_step_count(case):
    """Steps 31 to 36 of Keras's optimizer (Nadam's momentum-schedule product, the bias
    corrections): the store computes them from the step count it is given."""
    records, expected, _ = _train_both(CASES[case](), [0.05] * STEPS, steps_before=30)
    for k, want in enumerate(expected):
        _assert_close(records[:, k, :], want, f"{case}: slot {k}")


@pytest.mark.parametrize("case", ["nadam_weight_decay", "adadelta", "lion", "adamax"])
def test_checkpoint_restored_into_other_shards_trains_on_as_uninterrupted(tmp_path, case):
    """Rows and slots saved by 2 shards, restored into 3 at step 4: steps 4 to 6 reach the
    records of 2 shards trained uninterrupted (Nadam's product comes from the step count, which
    the caller restores: a parameter server's step count is saved beside the files)."""
    rule = store.optimizer_from_keras(CASES[case]())
    rng = np.random.default_rng(3)
    batches = [(lambda ids: (ids, rng.normal(0, 1, (len(ids), DIM)).astype(np.float32)))(
        np.concatenate([rng.permutation(ROWS), rng.integers(0, ROWS, 20)])) for _ in range(STEPS)]
    uninterrupted, saved = _shards(rule), _shards(rule)
    for step, (ids, grads) in enumerate(batches, start=1):
        _apply(uninterrupted, ids, grads, 0.05, step)
        if step <= 3:
            _apply(saved, ids, grads, 0.05, step)
    paths = [str(tmp_path / f"t.shard-{s}-of-{SHARDS}") for s in range(SHARDS)]
    for shard, path in zip(saved, paths):
        shard.save(path)
    restored = _shards(rule, num_shards=3)
    for shard in restored:
        shard.restore(paths)
    np.testing.assert_array_equal(_records(restored), _records(saved))
    for step, (ids, grads) in enumerate(batches[3:], start=4):
        _apply(restored, ids, grads, 0.05, step)
    np.testing.assert_array_equal(_records(restored), _records(uninterrupted))


def test_weight_decay_decays_the_rows_an_apply_names_only():
    """The documented difference from a dense Keras variable: Keras decays every row each step;
    the store, like TensorFlow's sparse applies, the rows a step's gradient names."""
    shard = store.TableShard(DIM, ROWS, optimizer=store.optimizer_from_keras(
        keras.optimizers.AdamW(weight_decay=0.5)))
    before = shard.lookup(np.arange(ROWS))
    shard.apply_gradients(np.array([3]), np.zeros((1, DIM), np.float32), learning_rate=0.1)
    after = shard.lookup(np.arange(ROWS))
    np.testing.assert_array_equal(np.delete(after, 3, 0), np.delete(before, 3, 0))
    np.testing.assert_allclose(after[3], before[3] * (1 - 0.5 * 0.1), rtol=1e-6)


@pytest.mark.parametrize("optimizer, reason", [
    (keras.optimizers.Lamb(), "Lamb cannot be: its trust ratio is a norm over the whole variable"),
    (keras.optimizers.Adafactor(), "Adafactor cannot be: its second moments are factored"),
    (keras.optimizers.Muon(), "Muon cannot be: it orthogonalises the whole matrix update"),
    (keras.optimizers.ScheduleFreeAdamW(), "ScheduleFreeAdamW cannot be: its averages assume"),
    (type("MyAdam", (keras.optimizers.Adam,), {})(), "MyAdam cannot be: the store has no copy of its rule"),
    (keras.optimizers.SGD(use_ema=True), "use_ema")])
def test_an_optimizer_the_store_lacks_is_refused_naming_why_and_the_supported_list(optimizer, reason):
    with pytest.raises(ValueError, match="^ShardedEmbedding 'items' on parameter servers: Embedding ") as e:
        store.optimizer_from_keras(optimizer, "ShardedEmbedding 'items' on parameter servers")
    assert reason in str(e.value)
    if "use_ema" not in reason:
        assert "SGD, Adagrad, Adam, AdamW, Ftrl, RMSprop, Adadelta, Adamax, Lion, Nadam" in str(e.value)


def test_every_keras_optimizer_is_native_or_refused_with_its_reason():
    """A Keras release adding an optimizer makes this fail until it gets a rule or a reason."""
    wrappers = {"Optimizer", "LossScaleOptimizer", "MultiOptimizer", "OptimizerMap"}
    names = {n for n in dir(keras.optimizers) if n[0].isupper() and n not in wrappers
             and isinstance(getattr(keras.optimizers, n), type)}
    assert names == set(store.NATIVE_RULES) | set(store.NOT_ROW_BY_ROW), names


def test_exclude_from_weight_decay_is_asked_of_the_variable_standing_for_the_rows():
    from tfx_dist.embedding.trained import TrainedByStore

    class Table(TrainedByStore):
        def __init__(self, name):
            self.anchor = keras.Variable(0.0, name=name)  # as a table's anchor, among Keras's weights

        def _trained(self):
            return "table"

        def _use_rule(self, rule):
            self.used = rule

    optimizer = keras.optimizers.AdamW(weight_decay=0.1)
    excluded, by_name, kept = Table("ps_anchor"), Table("hybrid_anchor"), Table("local_anchor")
    optimizer.exclude_from_weight_decay(var_list=[excluded.anchor], var_names=["hybrid"])
    for table in (excluded, by_name, kept):
        table.set_optimizer(optimizer)
    assert (excluded.used.weight_decay, by_name.used.weight_decay, kept.used.weight_decay) == (0, 0, 0.1)


def test_checkpoints_name_every_rule_and_refuse_one_this_version_lacks():
    from tfx_dist.parameter_server import table_checkpoint

    for case in ("nadam_weight_decay", "adadelta", "lion", "adamax", "adamw", "rmsprop_centered"):
        rule = store.optimizer_from_keras(CASES[case]())
        assert table_checkpoint.decode_optimizer(table_checkpoint.encode_optimizer(rule)) == rule
    with pytest.raises(ValueError, match="optimizer rule this version does not have .KerasRule"):
        table_checkpoint.decode_optimizer('{"kind": "KerasRule", "name": "Lion", "slots": 1}')
