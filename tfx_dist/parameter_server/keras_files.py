"""A parameter-server table in Keras's one-file saves (`save_weights`, `model.save`).

Keras writes a model's variables into one HDF5 file (``.weights.h5``, alone or
inside a ``.keras`` zip) through each layer's ``save_own_variables(store)``. A
table on the servers can be far larger than a worker's memory, so its rows do
not pass through that file: as with `tf.train.Checkpoint`, the servers write
their shards (rows and optimizer slots, in parallel) beside the Keras file,
``<file>-tfx_ps-<layer>-<table id>.shard-<s>-of-<S>``, and the layer's entry in
the HDF5 file records what finds and reads them: the files' prefix, the
optimizer rule of their slots and the servers' step count. Loading looks for
the files beside the Keras file being read (it may have been copied with
them), else at the path they were written to (`keras.models.load_model` reads
a ``.keras`` file's weights from memory, or from a temporary folder).
Loading works with any number of servers (resharding), like checkpoints.

The Keras file and its shard files travel together: copy or delete them
together. The servers read and write the paths themselves, so the file must be
on storage the workers and servers share, and saved to a path on disk (not to an
in-memory buffer or a remote URL that Keras stages through a temporary folder).
"""

from __future__ import annotations

import os
import pathlib

import numpy as np

from tfx_dist.parameter_server import table_checkpoint

_PREFIX, _OPTIMIZER, _APPLIES = "tfx_ps_shard_prefix", "tfx_ps_optimizer", "tfx_ps_applies"


def keras_file_of(store, table_name: str) -> str:
    """The path of the Keras file (``.weights.h5`` or ``.keras``) that ``store`` writes or reads."""
    archive = getattr(store, "archive", None)
    if archive is not None and isinstance(getattr(archive, "filename", None), str):
        return os.path.abspath(archive.filename)
    path = getattr(store, "path", None) or getattr(store, "path_or_io", None)
    if isinstance(path, (str, pathlib.Path)):
        return os.path.abspath(str(path))
    raise ValueError(
        f"ShardedEmbedding '{table_name}': its rows live on parameter servers, which save them "
        "beside the Keras file, but this save or load has no file path on disk (an in-memory "
        f"buffer, or a {type(store).__name__} store). Save to and load from a local path.")


# Text in a Keras store: HDF5 entries hold arrays, so text goes in as its UTF-8 bytes.
# (The hybrid strategy's keras_files uses these too.)
def text_entry(value: str) -> np.ndarray:
    """``value`` as a Keras store entry: its UTF-8 bytes, uint8."""
    return np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()


def read_text_entry(store, key: str) -> str:
    """The text that `text_entry` put in ``store[key]``."""
    return bytes(np.asarray(store[key], dtype=np.uint8)).decode("utf-8")


def save(table, store) -> None:
    """Has the servers write ``table``'s shards beside the Keras file; records them in ``store``."""
    prefix = table_checkpoint.table_prefix(keras_file_of(store, table.name), table.name, table.table_id)
    applies = table.save(prefix)
    store[_PREFIX] = text_entry(prefix)
    store[_OPTIMIZER] = text_entry(table_checkpoint.encode_optimizer(table.optimizer_rule))
    store[_APPLIES] = np.asarray(applies, dtype=np.int64)


def load(table, store) -> None:
    """Replaces ``table``'s rows (and slots) on every server with those ``store`` records."""
    if _PREFIX not in store:
        raise ValueError(
            f"ShardedEmbedding '{table.name}': this Keras file holds no rows of the table (it was "
            "not saved from a model whose table lives on parameter servers).")
    written = read_text_entry(store, _PREFIX)
    try:  # beside the file being read (it may have been copied with its shards) ...
        prefix = table_checkpoint.beside(written, keras_file_of(store, table.name))
    except ValueError:  # ... or, read from memory (load_model of a .keras), where written
        prefix = written
    if not table_checkpoint.existing_shards(prefix):
        prefix = written
    table.restore(prefix, table_checkpoint.decode_optimizer(read_text_entry(store, _OPTIMIZER)),
                  int(np.asarray(store[_APPLIES])))
