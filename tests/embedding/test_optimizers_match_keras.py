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
from tfx_dist.tables import general_rule

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


def _keras_slots(opt) -> list:
    """Keras's slot variables in the store's record order (see optimizers.h)."""
    name = type(opt).__name__
    if name == "SGD":
        return list(opt.momentums)
    if name == "Adagrad":
        return list(opt._accumulators)
    if name in ("Adam", "AdamW"):
        return list(opt._momentums) + list(opt._velocities) + list(getattr(opt, "_velocity_hats", []) or [])
    if name == "RMSprop":
        return list(opt._velocities) + list(opt._momentums) + list(opt._average_gradients)
    if name == "Lion":
        return list(opt._momentums)
    if name == "Adamax":
        return list(opt._m) + list(opt._u)
    if name == "Adadelta":
        return list(opt._accumulated_grads) + list(opt._accumulated_delta_vars)
    if name == "Ftrl":
        return list(opt._accumulators) + list(opt._linears)
    raise AssertionError(name)


def _train_both(keras_opt, learning_rates, seed=0):
    rule = store.optimizer_from_keras(keras_opt)
    shards = [store.TableShard(DIM, ROWS, shard_index=s, num_shards=SHARDS, name="match", seed=7,
                               optimizer=rule)
              for s in range(SHARDS)]
    all_ids = np.arange(ROWS)
    owner = store.shard_of(all_ids, SHARDS, dynamic=False)
    initial = np.empty((ROWS, DIM), np.float32)
    for s, shard in enumerate(shards):
        initial[owner == s] = shard.lookup(all_ids[owner == s])
    var = keras.Variable(initial, dtype="float32")
    rng = np.random.default_rng(seed)
    for step, lr in enumerate(learning_rates, start=1):
        ids = np.concatenate([rng.permutation(ROWS), rng.integers(0, ROWS, 20)])
        grads = rng.normal(0, 1, (len(ids), DIM)).astype(np.float32)
        dense = np.zeros((ROWS, DIM), np.float32)
        np.add.at(dense, ids, grads)
        keras_opt.learning_rate = lr
        keras_opt.apply([dense], [var])
        mine = store.shard_of(ids, SHARDS, dynamic=False)
        for s, shard in enumerate(shards):
            if isinstance(rule, store.KerasRule):  # the general path: Keras's own update step
                general_rule.apply_rows(shard, rule, ids[mine == s], grads[mine == s], lr, step)
            else:
                shard.apply_gradients(ids[mine == s], grads[mine == s], learning_rate=lr, step=step)
    records = np.stack([shards[owner[i]].read_record(i) for i in range(ROWS)])  # (rows, 1+slots, dim)
    expected = [var.numpy()] + [np.asarray(v.numpy()) for v in _keras_slots(keras_opt)]
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
    # No native kernel: the general path (tables/general_rule.py).
    "lion": lambda: keras.optimizers.Lion(beta_1=0.8),
    "adamax_weight_decay": lambda: keras.optimizers.Adamax(beta_2=0.99, weight_decay=0.3),
    "adadelta": lambda: keras.optimizers.Adadelta(rho=0.9, epsilon=1e-2),  # larger steps: trains in 6
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
                                  "adamw", "adamax_weight_decay"])
def test_learning_rate_changing_per_step(case):
    records, expected, _ = _train_both(CASES[case](), [0.1, 0.05, 0.02, 0.08, 0.01, 0.03], seed=1)
    for k, want in enumerate(expected):
        _assert_close(records[:, k, :], want, f"{case}: slot {k}")


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


def test_the_store_refuses_to_apply_a_rule_it_has_no_kernel_for():
    shard = store.TableShard(DIM, ROWS, optimizer=store.optimizer_from_keras(keras.optimizers.Lion()))
    assert shard.num_slots == 1
    with pytest.raises(store.FailedPreconditionError, match="no kernel in the store"):
        shard.apply_gradients(np.array([1]), np.ones((1, DIM), np.float32), learning_rate=0.1)


@pytest.mark.parametrize("optimizer, refused", [(keras.optimizers.Nadam(), "optimizer=Nadam"),
                                                (keras.optimizers.Lamb(), "optimizer=Lamb"),
                                                (keras.optimizers.SGD(use_ema=True), "use_ema")])
def test_an_optimizer_the_store_lacks_is_refused_naming_what_it_trains(optimizer, refused):
    with pytest.raises(ValueError, match="^ShardedEmbedding 'items' on parameter servers: Embedding ") as e:
        store.optimizer_from_keras(optimizer, "ShardedEmbedding 'items' on parameter servers")
    assert refused in str(e.value)


def test_parameter_servers_refuse_a_rule_without_kernel_saying_where_it_runs():
    from tfx_dist.embedding.trained import TrainedByStore

    class OnServers(TrainedByStore):  # as RemoteTable and the servers' dense tables are
        def _trained(self):
            return "ShardedEmbedding 'items' on parameter servers"

        def _use_rule(self, rule):
            raise AssertionError("a refused rule reached the servers")

    with pytest.raises(ValueError, match="^ShardedEmbedding 'items' on parameter servers: Lion has no "
                                         "kernel .*HybridStrategy.*RMSprop"):
        OnServers().set_optimizer(keras.optimizers.Lion())


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
