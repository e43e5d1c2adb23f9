"""The one Keras file format of a ShardedEmbedding table, with a local table (no strategy)."""

import h5py
import keras
import numpy as np
import pytest

from tfx_dist.layers import ShardedEmbedding
from tfx_dist.tables import Placement, keras_file


def _model(seed):
    ids = keras.Input((2,), dtype="int64")
    x = ShardedEmbedding(7, 3, combiner="sum", name="items",
                         embeddings_initializer=keras.initializers.RandomUniform(seed=seed))(ids)
    return keras.Model(ids, keras.layers.Dense(1, name="out")(x))


def test_local_table_writes_rows_in_id_order_and_loads_them(tmp_path, monkeypatch):
    monkeypatch.setattr(keras_file, "CHUNK_BYTES", 24)  # 2 rows per chunk: several chunks
    saved = _model(1)
    assert saved.get_layer("items").table.placement is Placement.LOCAL
    path = str(tmp_path / "w.weights.h5")
    saved.save_weights(path)
    with h5py.File(path, "r") as f:
        group = f["layers/sharded_embedding/vars"]
        np.testing.assert_array_equal(group["tfx_table_records"][:, 0],
                                      saved.get_layer("items").table.embeddings.numpy())
        assert "0" not in group  # the table's entries only, the same under every placement
    loaded = _model(2)
    loaded.load_weights(path)
    probe = np.array([[0, 1], [5, 6], [3, 3]])
    np.testing.assert_array_equal(loaded(probe), saved(probe))
    served = keras.models.load_model(_saved_model(saved, tmp_path))
    np.testing.assert_array_equal(served(probe), saved(probe))


def _saved_model(model, tmp_path):
    path = str(tmp_path / "m.keras")
    model.save(path)
    return path


def test_file_of_an_earlier_release_still_loads(tmp_path):
    saved = _model(1)
    path = str(tmp_path / "old.weights.h5")
    saved.save_weights(path)
    with h5py.File(path, "r+") as f:  # the earlier layout: Keras's own "0" entry
        group = f["layers/sharded_embedding/vars"]
        rows = group["tfx_table_records"][:, 0]
        for key in list(group):
            del group[key]
        group["0"] = rows
    loaded = _model(2)
    loaded.load_weights(path)
    np.testing.assert_array_equal(loaded.get_layer("items").table.embeddings.numpy(), rows)


def test_rows_of_another_width_are_refused_naming_the_table(tmp_path):
    path = str(tmp_path / "w.weights.h5")
    _model(1).save_weights(path)
    ids = keras.Input((2,), dtype="int64")
    other = keras.Model(ids, keras.layers.Dense(1, name="out")(
        ShardedEmbedding(7, 5, combiner="sum", name="items")(ids)))
    with pytest.raises(ValueError, match="items"):
        other.load_weights(path)
