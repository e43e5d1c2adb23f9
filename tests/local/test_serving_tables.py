"""Which tables `tfx_dist.serving` folds into plain weights, in one process (no servers).

A dynamic table (``input_dim=None``, here a local dynamic table) and a table
over ``max_table_bytes`` cannot become plain weights: `servable_tables` says
so per table, and `to_plain_model` raises one error naming every such table
with its size and the tables that do fold. `export_for_serving` serves a
dynamic table as compact rows (the ids its store holds; others get zeros), and
refuses, by name, a table over ``max_table_bytes`` held in a Keras variable.
"""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfx_dist
from tfx_dist.layers import ShardedEmbedding


def _model():
    ids = keras.Input((2,), dtype="int64")
    small = ShardedEmbedding(10, 4, combiner="mean", name="small")(ids)
    big = ShardedEmbedding(1000, 8, combiner="sum", name="big")(ids)
    dynamic = ShardedEmbedding(None, 4, combiner="mean", name="dynamic")(ids)
    return keras.Model(ids, keras.layers.Dense(1)(keras.layers.Concatenate()([small, big, dynamic])))


def test_servable_tables_and_one_error_naming_each_refused_table(tmp_path):
    model = _model()
    report = tfx_dist.serving.servable_tables(model, max_table_bytes=10_000)
    assert report["small"] is None
    assert "32,000 bytes" in report["big"] and "max_table_bytes=10,000" in report["big"]
    assert "dynamic table" in report["dynamic"] and "local" in report["dynamic"]
    with pytest.raises(ValueError) as e:
        tfx_dist.serving.to_plain_model(model, max_table_bytes=10_000)
    message = str(e.value)
    assert "folds 1 of 3 tables" in message and "'small'" in message, message
    assert "'big' (1,000 x 8)" in message and "'dynamic'" in message, message
    with pytest.raises(ValueError, match="'big' keeps its rows in a Keras variable") as e:
        tfx_dist.serving.export_for_serving(model, str(tmp_path / "e"), 10_000)
    assert "'dynamic'" not in str(e.value)  # served as compact rows
    assert not (tmp_path / "e").exists()


class UserModel(keras.Model):
    def __init__(self):
        super().__init__()
        self.table = ShardedEmbedding(None, 4, name="user_ids")
        self.head = keras.layers.Dense(1)

    def call(self, ids):
        return self.head(self.table(ids))


def test_subclassed_model_with_a_dynamic_table_is_served_as_compact_rows(tmp_path):
    model = UserModel()
    trained = model(np.array([3, 5])).numpy()
    tfx_dist.serving.export_for_serving(model, str(tmp_path / "e"))
    served = tf.saved_model.load(str(tmp_path / "e"))
    np.testing.assert_allclose(served.serve(tf.constant([5.0, 3.0])), trained[::-1], rtol=1e-6)
    # (Keras traces a subclassed model's signature in float32.) An id the store does not hold: the
    # zero row, through the head (its bias).
    np.testing.assert_allclose(served.serve(tf.constant([7.0])), [model.head.bias.numpy()],
                               rtol=1e-6)
    # The model's own table is back: it still trains and predicts.
    assert model(np.array([3, 5])).shape == (2, 1)
    assert model.table.table.placement.value != "served"
