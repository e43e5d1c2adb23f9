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


def test_compact_rows_come_from_the_stores_reader_and_a_corrupt_shard_file_is_named(tmp_path, monkeypatch):
    """The rows are read by the store's own reader, checksum included: a flipped byte in a row of
    a shard file is an error naming the file (a second reader in Python once served it)."""
    from tfx_dist import serving_compact
    from tfx_dist.embedding import store

    model = UserModel()
    ids = np.array([3, 5, 11])
    model(ids)
    expected = model.table.table.shard.lookup(ids)
    got_ids, rows = serving_compact.written_rows(model.table, str(tmp_path))
    np.testing.assert_array_equal(got_ids, ids)
    np.testing.assert_array_equal(rows, expected)

    saved = []
    save = model.table.table.save

    def save_then_flip_a_row_byte(prefix):
        steps = save(prefix)
        (path,) = tf.io.gfile.glob(prefix + ".shard-*")
        data = bytearray(open(path, "rb").read())
        name_len = int.from_bytes(data[12:16], "little")
        data[88 + name_len + 8 + 3] ^= 0x40  # the high byte of the first record's first value
        open(path, "wb").write(bytes(data))
        saved.append(path)
        return steps

    monkeypatch.setattr(model.table.table, "save", save_then_flip_a_row_byte)
    with pytest.raises(store.DataLossError, match="checksum mismatch") as e:
        serving_compact.written_rows(model.table, str(tmp_path))
    assert saved[0] in str(e.value), str(e.value)
