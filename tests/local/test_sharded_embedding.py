"""`tfx_dist.layers.ShardedEmbedding` with a local table (no parameter servers)."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from tfx_dist.layers import ShardedEmbedding

ROWS, DIM = 50, 6


def _layer(combiner=None, seed=0):
    layer = ShardedEmbedding(ROWS, DIM, combiner=combiner,
                             embeddings_initializer=keras.initializers.RandomNormal(seed=seed))
    layer.build()
    return layer, layer.table.embeddings.numpy()


def _combine(rows_per_example, combiner):
    out = []
    for rows in rows_per_example:
        if len(rows) == 0:
            out.append(np.zeros(DIM, np.float32))
            continue
        total = np.sum(rows, axis=0)
        n = len(rows)
        out.append({"sum": total, "mean": total / n, "sqrtn": total / np.sqrt(n)}[combiner])
    return np.stack(out)


def test_without_combiner_equals_keras_embedding():
    layer, table = _layer()
    ids = np.random.RandomState(1).randint(0, ROWS, (4, 3, 2))
    reference = keras.layers.Embedding(ROWS, DIM)
    reference.build()
    reference.set_weights([table])
    np.testing.assert_array_equal(layer(ids).numpy(), reference(ids).numpy())
    assert layer.compute_output_shape((4, 3, 2)) == (4, 3, 2, DIM)


@pytest.mark.parametrize("combiner", ["sum", "mean", "sqrtn"])
def test_combiners_on_dense_ragged_and_sparse_ids(combiner):
    layer, table = _layer(combiner)
    per_example = [[1, 4, 4], [7], [], [0, 49, 3, 3]]
    want = _combine([table[i] for i in per_example], combiner)

    ragged = tf.ragged.constant(per_example, dtype=tf.int64)
    np.testing.assert_allclose(layer(ragged).numpy(), want, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(layer(ragged.to_sparse()).numpy(), want, rtol=1e-6, atol=1e-7)

    dense = np.array([[2, 2, 9], [5, 1, 0]])
    np.testing.assert_allclose(layer(dense).numpy(), _combine([table[r] for r in dense], combiner),
                               rtol=1e-6, atol=1e-7)


def test_gradient_is_one_row_per_distinct_id():
    layer, _ = _layer()
    ids = tf.constant([[3, 3, 8], [8, 3, 1]], tf.int64)
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(layer(ids))
    grad = tape.gradient(loss, layer.trainable_variables)[0]
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy().tolist()) == [1, 3, 8]
    counts = dict(zip(grad.indices.numpy().tolist(), grad.values.numpy()[:, 0].tolist()))
    assert counts == {3: 3.0, 8: 2.0, 1: 1.0}


def test_gradient_sums_repeated_ids_like_keras_embedding():
    # Each position weighted differently: repeated ids' gradients must be summed per id.
    layer, table = _layer()
    reference = keras.layers.Embedding(ROWS, DIM)
    reference.build()
    reference.set_weights([table])
    rng = np.random.RandomState(2)
    ids = tf.constant(rng.randint(0, 6, (16, 5)), tf.int64)  # few distinct ids, many repeats
    weights = tf.constant(rng.normal(size=(16, 5, DIM)), tf.float32)

    def dense_gradient(embedding):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(embedding(ids) * weights)
        return tf.convert_to_tensor(tape.gradient(loss, embedding.trainable_variables[0])).numpy()

    np.testing.assert_allclose(dense_gradient(layer), dense_gradient(reference), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [ROWS, -ROWS - 1])
def test_ids_out_of_range_name_the_layer(bad):
    layer = ShardedEmbedding(ROWS, DIM, name="user_table")
    with pytest.raises(tf.errors.InvalidArgumentError, match="user_table"):
        layer(np.array([[0, bad]]))


@pytest.mark.parametrize("initializer", [
    keras.initializers.HeNormal(seed=7), keras.initializers.GlorotUniform(seed=7),
    keras.initializers.LecunNormal(seed=7),
    keras.initializers.VarianceScaling(2.0, "fan_avg", "untruncated_normal", seed=7)])
def test_keras_embedding_arguments_mean_what_they_mean_there(initializer):
    """Variance-scaling initializers (the same numbers as Keras's layer for a seed), negative
    ids, mask_zero's mask, constraints, and a config that round-trips."""
    layer = ShardedEmbedding(ROWS, DIM, embeddings_initializer=initializer, mask_zero=True,
                             embeddings_constraint="non_neg")
    reference = keras.layers.Embedding(ROWS, DIM, embeddings_initializer=initializer, mask_zero=True)
    ids = np.array([[1, -1, 0], [0, -ROWS, 3]])
    np.testing.assert_array_equal(layer(ids).numpy(), reference(ids).numpy())
    np.testing.assert_array_equal(layer.compute_mask(ids).numpy(), reference.compute_mask(ids).numpy())
    again = ShardedEmbedding.from_config(layer.get_config())
    assert type(again.keras_initializer) is type(initializer)
    assert isinstance(again.embeddings_constraint, keras.constraints.NonNeg)
    # The table's Keras variable carries the constraint: Keras's optimizer applies it.
    assert isinstance(layer.table.embeddings.constraint, keras.constraints.NonNeg)


def test_mask_zero_with_a_combiner_leaves_padding_out_and_regularizer_sees_looked_up_rows():
    layer = ShardedEmbedding(ROWS, 2, combiner="mean", mask_zero=True, embeddings_initializer="ones",
                             embeddings_regularizer=keras.regularizers.L2(0.1))
    out = layer(np.array([[2, 0, 0], [0, 0, 0], [4, 5, 0]]))
    np.testing.assert_array_equal(out.numpy(), [[1, 1], [0, 0], [1, 1]])
    # Distinct ids looked up: 2, 4, 5 (the padding is not): 3 rows of 2 ones, times 0.1.
    np.testing.assert_allclose([float(x) for x in layer.losses], [0.6], rtol=1e-6)


def test_bad_arguments():
    with pytest.raises(ValueError, match="dynamic table"):
        ShardedEmbedding(None, 4, embeddings_initializer="he_normal")
    with pytest.raises(ValueError, match="combiner"):
        ShardedEmbedding(10, 4, combiner="max")
    with pytest.raises(ValueError, match="output_dim"):
        ShardedEmbedding(10, 0)
    # A dynamic table without servers lives in this process (tables/local_dynamic.py).
    assert ShardedEmbedding(None, 4)(np.array([[1]])).shape == (1, 1, 4)
    with pytest.raises(ValueError, match="combiner"):
        ShardedEmbedding(10, 4)(tf.ragged.constant([[1], [2, 3]]))
    with pytest.raises(TypeError, match="integer ids"):
        ShardedEmbedding(10, 4)(tf.constant([["1"]]))
    # Float ids are cast, as keras.layers.Embedding does (Keras traces subclassed models in float).
    layer = ShardedEmbedding(10, 4)
    np.testing.assert_array_equal(layer(np.array([[3.0]])), layer(np.array([[3]])))


def _click_model(strategy=None, optimizer=None):
    """Two categorical features and a planted signal: id parity decides the label."""
    scope = strategy.scope() if strategy else tf.name_scope("none")
    with scope:
        ids = keras.Input((2,), dtype="int64")
        x = ShardedEmbedding(ROWS, 8, combiner="mean",
                             embeddings_initializer=keras.initializers.RandomUniform(
                                 -0.05, 0.05, seed=3))(ids)
        out = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=4))(x)
        model = keras.Model(ids, out)
        model.compile(optimizer or keras.optimizers.Adagrad(1.0), "binary_crossentropy")
    return model


def _click_data(n=512):
    rs = np.random.RandomState(0)
    ids = rs.randint(0, ROWS, (n, 2))
    label = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]
    return ids, label


def test_fit_learns_and_saves():
    ids, label = _click_data()
    model = _click_model()
    history = model.fit(ids, label, batch_size=64, epochs=6, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < 0.6 * losses[0], losses
    restored = keras.Model.from_config(model.get_config(),
                                       custom_objects={"ShardedEmbedding": ShardedEmbedding})
    restored.set_weights(model.get_weights())
    np.testing.assert_allclose(restored.predict(ids[:32], verbose=0),
                               model.predict(ids[:32], verbose=0), rtol=1e-6)


@pytest.mark.parametrize("optimizer", ["SGD", "Adagrad"])
def test_mirrored_strategy_matches_one_device(optimizer):
    """Replicated local table: sparse gradients from 4 replicas reduce to one device's.

    Adagrad is not linear in the gradient: it matches only if the replicas'
    rows for one id are summed before the optimizer sees them.
    """
    ids, label = _click_data(256)
    single = _click_model(optimizer=getattr(keras.optimizers, optimizer)(0.5))
    single.fit(ids, label, batch_size=64, epochs=2, verbose=0, shuffle=False)
    strategy = tfx_dist.MirroredStrategy([f"/cpu:{i}" for i in range(4)])
    with strategy.scope():
        mirrored = _click_model(strategy, getattr(keras.optimizers, optimizer)(0.5))
    mirrored.fit(ids, label, batch_size=64, epochs=2, verbose=0, shuffle=False)
    for a, b in zip(single.get_weights(), mirrored.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_lion_trains_a_table_of_this_process_as_keras_does():
    """Lion (weight decay too), the store's kernel: a dynamic table in this process equals Keras's
    Lion on keras.layers.Embedding where every step names every row."""
    rows, n = 16, 128
    ids = np.stack([np.arange(n) % rows, (np.arange(n) * 7 + 3) % rows], 1)  # 16 examples: every row
    label = ((ids[:, 0] % 2) == 0).astype("float32")[:, None]

    def train(table):
        inputs = keras.Input((2,), dtype="int64")
        hidden = keras.layers.Flatten()(table(inputs))
        out = keras.layers.Dense(1, activation="sigmoid",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=4))(hidden)
        model = keras.Model(inputs, out)
        model.compile(keras.optimizers.Lion(0.01, weight_decay=0.5), "binary_crossentropy")
        losses = model.fit(ids, label, batch_size=16, epochs=2, shuffle=False, verbose=0).history["loss"]
        return losses, table(np.arange(rows)[:, None]).numpy()[:, 0]

    losses, rows_here = train(ShardedEmbedding(None, 4, embeddings_initializer="zeros"))
    keras_losses, keras_rows = train(keras.layers.Embedding(rows, 4, embeddings_initializer="zeros"))
    assert losses[-1] < losses[0]
    np.testing.assert_allclose(losses, keras_losses, rtol=1e-5)
    np.testing.assert_allclose(rows_here, keras_rows, rtol=1e-5, atol=1e-7)


def test_an_optimizer_that_is_not_row_by_row_is_refused_at_the_first_step():
    """Lamb's trust ratio is a norm over the whole variable: fit fails at once naming why and the
    supported list, rather than training the table with another rule."""
    inputs = keras.Input((2,), dtype="int64")
    out = keras.layers.Dense(1)(keras.layers.Flatten()(ShardedEmbedding(None, 4)(inputs)))
    model = keras.Model(inputs, out)
    model.compile(keras.optimizers.Lamb(0.01), "mse")
    with pytest.raises(ValueError, match="Lion, Nadam .*Lamb cannot be: its trust ratio is a norm "
                                         "over the whole variable"):
        model.fit(np.zeros((4, 2), np.int64), np.zeros((4, 1)), verbose=0)
