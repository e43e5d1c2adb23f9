"""Checks shared by the single-process strategy tests (Mirrored, CentralStorage).

Each function takes a strategy factory and asserts numbers: losses fall,
accuracy is reached, replicas agree, checkpoints round-trip.
"""

from __future__ import annotations

import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

from local.models import batched, digits, graph_op_types, max_abs_diff, seeds_model

HERE = os.path.dirname(os.path.abspath(__file__))


def fit_evaluate_predict(strategy):
    """The seeds' program: fit with validation, evaluate, predict."""
    keras.utils.set_random_seed(1)
    (x, y), (x_val, y_val) = digits()
    global_batch = 64 * strategy.num_replicas_in_sync
    with strategy.scope():
        model = seeds_model()
    history = model.fit(batched(x, y, global_batch), epochs=5,
                        validation_data=batched(x_val, y_val, global_batch, shuffle=False),
                        verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.5 * losses[0], losses
    assert history.history["val_accuracy"][-1] > 0.8, history.history
    loss, accuracy = model.evaluate(batched(x_val, y_val, global_batch, shuffle=False), verbose=0)
    assert accuracy > 0.8 and loss < 1.0
    probabilities = model.predict(batched(x_val, y_val, global_batch, shuffle=False), verbose=0)
    assert probabilities.shape == (len(x_val), 10)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)
    # Keras averages per-replica metric values, so a last batch split unevenly
    # across replicas moves `evaluate`'s accuracy a little off the exact one.
    np.testing.assert_allclose(np.mean(np.argmax(probabilities, axis=1) == y_val), accuracy,
                               atol=0.02)
    return model


def functional_dict_inputs(strategy):
    keras.utils.set_random_seed(2)
    (x, y), _ = digits()
    features = {"left": x[:, :32], "right": x[:, 32:]}
    with strategy.scope():
        left = keras.Input((32,), name="left")
        right = keras.Input((32,), name="right")
        hidden = keras.layers.Dense(64, activation="relu")(keras.layers.Concatenate()([left, right]))
        model = keras.Model({"left": left, "right": right},
                            keras.layers.Dense(10, activation="softmax")(hidden))
        model.compile(keras.optimizers.Adam(0.01), "sparse_categorical_crossentropy",
                      metrics=["accuracy"])
    ds = tf.data.Dataset.from_tensor_slices((features, y)).batch(32 * strategy.num_replicas_in_sync)
    history = model.fit(ds, epochs=4, verbose=0)
    assert history.history["loss"][-1] < 0.5 * history.history["loss"][0], history.history
    assert model.evaluate(ds, verbose=0)[1] > 0.85


def custom_training_loop(strategy, use_dataset_fn: bool):
    """strategy.run in tf.function, strategy.reduce, strategy.gather; loss falls."""
    keras.utils.set_random_seed(3)
    (x, y), _ = digits()
    global_batch = 32 * strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                                  keras.layers.Dense(10)])
        optimizer = keras.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="none")

    if use_dataset_fn:
        def dataset_fn(context):
            batch = context.get_per_replica_batch_size(global_batch)
            return tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch)
        dataset = strategy.distribute_datasets_from_function(dataset_fn)
    else:
        dataset = strategy.experimental_distribute_dataset(
            tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(global_batch))

    def replica_step(features, labels):
        with tf.GradientTape() as tape:
            per_example = loss_fn(labels, model(features, training=True))
            loss = tf.nn.compute_average_loss(per_example, global_batch_size=global_batch)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss, tf.shape(labels)[:1]

    @tf.function
    def train_step(features, labels):
        per_replica_loss, per_replica_count = strategy.run(replica_step, args=(features, labels))
        return (strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica_loss, axis=None),
                strategy.gather(per_replica_count, axis=0))

    iterator = iter(dataset)
    losses = []
    for _ in range(40):
        loss, counts = train_step(*next(iterator))
        losses.append(float(loss))
    assert counts.shape == (strategy.num_replicas_in_sync,)
    assert int(tf.reduce_sum(counts)) == global_batch
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5]), losses
    return train_step, iterator


def reduce_and_gather(strategy):
    """strategy.reduce and strategy.gather on known per-replica values."""
    n = strategy.num_replicas_in_sync

    def value_fn():
        rid = tf.distribute.get_replica_context().replica_id_in_sync_group
        return tf.fill([2], tf.cast(rid, tf.float32) + 1.0)

    per_replica = strategy.run(tf.function(value_fn))
    total = strategy.reduce("SUM", per_replica, axis=None)
    mean = strategy.reduce("MEAN", per_replica, axis=None)
    expected = n * (n + 1) / 2
    np.testing.assert_allclose(total.numpy(), [expected] * 2)
    np.testing.assert_allclose(mean.numpy(), [expected / n] * 2)
    gathered = strategy.gather(per_replica, axis=0)
    np.testing.assert_allclose(gathered.numpy(), np.repeat(np.arange(1, n + 1), 2))


def sparse_gradients(strategy):
    """IndexedSlices gradients from tf.gather reduce to the right dense update."""
    n = strategy.num_replicas_in_sync
    with strategy.scope():
        table = tf.Variable(tf.zeros([6, 2]))

    @tf.function
    def step():
        def replica_fn():
            rid = tf.distribute.get_replica_context().replica_id_in_sync_group
            with tf.GradientTape() as tape:
                rows = tf.gather(table, [rid, rid, 5])
                loss = tf.reduce_sum(rows)
            (grad,) = tape.gradient(loss, [table])
            assert isinstance(grad, tf.IndexedSlices)
            summed = tf.distribute.get_replica_context().all_reduce("SUM", grad)
            return tf.convert_to_tensor(summed)
        return strategy.run(replica_fn)

    result = strategy.experimental_local_results(step())
    expected = np.zeros([6, 2])
    for rid in range(n):
        expected[rid] += 2
    expected[5] += n
    for dense in result:
        np.testing.assert_allclose(dense.numpy(), expected)


def sgd_train_step(strategy, *units):
    """A tf.function that trains a Dense stack of `units` on 4 features by one SGD step."""
    with strategy.scope():
        model = keras.Sequential([keras.Input((4,))] + [keras.layers.Dense(u) for u in units])
        optimizer = keras.optimizers.SGD(0.1)

    @tf.function
    def step(x):
        def replica_fn(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(x))
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables))
        strategy.run(replica_fn, args=(x,))

    return step


def uses_fused_reduce(strategy):
    """The gradient all-reduce of a training step runs on TfxFusedReduce."""
    step = sgd_train_step(strategy, 3)
    assert "TfxFusedReduce" in graph_op_types(step, tf.TensorSpec([2, 4]))


def checkpoint_round_trip(strategy, tmp_path, restore_strategies=()):
    """tf.train.Checkpoint and Keras save/load restore the same weights, also
    under other strategies (and none)."""
    model = fit_small(strategy)
    weights = model.get_weights()
    ckpt_prefix = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
    keras_path = str(tmp_path / "model.keras")
    model.save(keras_path)
    for other in (strategy,) + tuple(restore_strategies) + (None,):
        scope = other.scope() if other is not None else _null_scope()
        with scope:
            fresh = seeds_model()
            tf.train.Checkpoint(model=fresh).restore(ckpt_prefix).assert_existing_objects_matched()
            assert max_abs_diff(fresh.get_weights(), weights) == 0.0
            loaded = keras.models.load_model(keras_path)
            assert max_abs_diff(loaded.get_weights(), weights) == 0.0
    # The restored model keeps training.
    (x, y), _ = digits()
    loaded.fit(batched(x, y, 64), epochs=1, verbose=0)


def fit_small(strategy):
    keras.utils.set_random_seed(4)
    (x, y), _ = digits(n_train=512)
    with strategy.scope():
        model = seeds_model()
    model.fit(batched(x, y, 64 * strategy.num_replicas_in_sync), epochs=1, verbose=0)
    return model


class _null_scope:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


def agrees_with_tensorflow(ours: str, theirs: str, tmp_path, same_loss: bool = True):
    """Weights after one epoch equal TensorFlow's strategy's (separate processes).

    ``same_loss=False`` where TensorFlow's strategy reports a wrong loss
    (CentralStorageStrategy's metric state, see tfx_dist.strategies.central_storage).
    """
    paths = {}
    for name in (ours, theirs):
        paths[name] = str(tmp_path / f"{name}.npz")
        subprocess.run([sys.executable, os.path.join(HERE, "reference_train.py"), name,
                        paths[name]], check=True, timeout=300)
    a, b = np.load(paths[ours]), np.load(paths[theirs])
    assert set(a.files) == set(b.files)
    if same_loss:
        np.testing.assert_allclose(a["loss"], b["loss"], rtol=1e-5)
    for key in set(a.files) - ({"loss"} if not same_loss else set()):
        np.testing.assert_allclose(a[key], b[key], rtol=1e-5, atol=1e-6, err_msg=key)


def drops_iterators_in_the_background(strategy):
    """Input iterators the program drops are destroyed by tfx_dist's reaper thread."""
    import gc
    import threading
    import weakref

    from tfx_dist.input import iterator_reaper

    def destroying_thread(distributed):
        iterator = iter(distributed)
        next(iterator)
        where = []
        # The callback runs in the thread that destroys the tf.data iterator.
        watch = weakref.ref(iterator._iterators[0]._iterator,
                            lambda _: where.append(threading.current_thread().name))
        del iterator
        gc.collect()
        assert iterator_reaper.wait_idle(10)
        assert watch() is None
        return where

    dataset = tf.data.Dataset.range(64).batch(8).prefetch(tf.data.AUTOTUNE)
    for distributed in (strategy.experimental_distribute_dataset(dataset),
                        strategy.distribute_datasets_from_function(lambda ctx: dataset)):
        assert destroying_thread(distributed) == ["tfx_iterator_reaper"]
    # TensorFlow's own strategy's iterators are left alone.
    theirs = tf.distribute.MirroredStrategy(["/cpu:0"]).experimental_distribute_dataset(dataset)
    assert destroying_thread(theirs) == [threading.current_thread().name]


def dealt_out(strategy, use_dataset_fn: bool, in_function: bool):
    """Every step's per-replica values of a 23-element dataset (partial last batches)."""
    data = tf.data.Dataset.range(23).map(lambda i: {"x": tf.cast(i, tf.float32), "i": i})
    if use_dataset_fn:
        distributed = strategy.distribute_datasets_from_function(lambda ctx: data.batch(2))
    else:
        distributed = strategy.experimental_distribute_dataset(data.batch(7))
    steps = []
    if not in_function:
        for batch in distributed:
            steps.append([v.numpy().tolist() for v in strategy.experimental_local_results(batch["i"])])
        return distributed, steps

    @tf.function
    def step(iterator):
        optional = iterator.get_next_as_optional()
        empty = [tf.zeros([0], tf.int64)] * strategy.num_replicas_in_sync
        return optional.has_value(), tf.cond(
            optional.has_value(),
            lambda: list(strategy.experimental_local_results(optional.get_value()["i"])),
            lambda: empty)

    iterator = iter(distributed)
    while True:
        has_value, values = step(iterator)
        if not has_value:
            return distributed, steps
        steps.append([v.numpy().tolist() for v in values])


def reads_directly(distributed) -> bool:
    """Whether a distributed dataset's worker reads with a plain tf.data iterator
    (tfx_dist's direct input), not TensorFlow's multi-device iterator."""
    iterator = iter(distributed)  # kept alive: its wrappers hand their iterators over when dropped
    return type(iterator._iterators[0]._iterator).__name__ == "OwnedIterator"
