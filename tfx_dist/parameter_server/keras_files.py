"""A parameter-server table in Keras's one-file saves (`save_weights`, `model.save`).

A table of fixed size goes into the chief's file in the one format of every
placement (`tfx_dist.tables.keras_file`), so the file loads under any strategy:
the servers write their shards (rows and optimizer slots, in parallel) to
temporary files beside the Keras file, the chief reads them back into the
file's records in id order, pass by pass (a bounded share of the rows in
memory at a time), and removes them. Loading goes the other way: each worker
writes the file's records as shard files of the embedding store's format
beside the Keras file and has the servers read them (any number of servers;
idempotent, as every worker does it).

A dynamic table (``input_dim=None``) has no id order: its servers write their
shards beside the Keras file, ``<file>-tfx_ps-<layer>-<table id>.shard-<s>-of-<S>``,
and the layer's entry records what finds them (the files' prefix, the
optimizer rule of their slots, the servers' step count). Loading looks for the
files beside the Keras file being read, else at the path they were written
to. Such a file and its shard files travel together.

The servers read and write the paths themselves, so the file must be on
storage the workers and servers share, and saved to a path on disk (not to an
in-memory buffer or a remote URL that Keras stages through a temporary folder).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import numpy as np

from tfx_dist.embedding import store as store_lib
from tfx_dist.parameter_server import table_checkpoint
from tfx_dist.tables import keras_file
from tfx_dist.tables.keras_file import read_text_entry, text_entry  # noqa: F401 (earlier home)

# The most bytes of records one pass over the servers' files holds (the table's share
# ``id % passes == p`` per pass).
PASS_BYTES = 1 << 30

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


def save_beside(table, store) -> None:
    """Has the servers write ``table``'s shards beside the Keras file; records them in ``store``."""
    prefix = table_checkpoint.table_prefix(keras_file_of(store, table.name), table.name, table.table_id)
    applies = table.save(prefix)
    store[_PREFIX] = text_entry(prefix)
    store[_OPTIMIZER] = text_entry(table_checkpoint.encode_optimizer(table.optimizer_rule))
    store[_APPLIES] = np.asarray(applies, dtype=np.int64)


def load_beside(table, store) -> None:
    """Replaces ``table``'s rows (and slots) on every server with the shard files ``store`` names."""
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


def _shard(table, rule, shard: int = 0, num_shards: int = 1):
    """An empty store shard configured as the servers' table (same initial rows; a fixed
    shard allocates its rows when written)."""
    return store_lib.TableShard(table.dim, table.input_dim, shard_index=shard, num_shards=num_shards,
                                name=table.name, table_id=table.table_id, seed=table.seed,
                                initializer=table.initializer, optimizer=rule)


def _layout(table, rule) -> tuple[int, int]:
    """(slots per row under ``rule``, passes over the rows that keep each under PASS_BYTES)."""
    probe = _shard(table, rule)
    num_slots, record_floats = probe.num_slots, probe.record_floats
    probe.close()
    return num_slots, max(1, -(-table.input_dim * record_floats * 4 // PASS_BYTES))


def _staging_dir(store, table_name: str) -> str:
    """A new folder the servers can reach: beside the Keras file (else the temporary folder)."""
    try:
        folder = os.path.dirname(keras_file_of(store, table_name))
    except ValueError:
        folder = None
    return tempfile.mkdtemp(prefix=".tfx_table-", dir=folder)


def save(table, store) -> None:
    """The table's rows and slots, from the servers into the chief's Keras file."""
    if table.input_dim is None:
        save_beside(table, store)
        return
    if not table.is_chief():
        keras_file.note_not_writer(store, "a worker that is not the chief")
        return
    rule = table.optimizer_rule or store_lib.SGD()
    num_slots, num_passes = _layout(table, rule)
    staging = _staging_dir(store, table.name)
    try:
        prefix = os.path.join(staging, "table")
        applies = table.save(prefix)
        paths = table_checkpoint.shard_files(prefix, table.name)
        dataset = keras_file.create(store, table.name, table.input_dim, (1 + num_slots, table.dim),
                                    table.optimizer_rule, applies)
        for p in range(num_passes):
            shard = _shard(table, rule, p, num_passes)
            shard.restore(paths)
            keras_file.write_strided(dataset, shard.read_records, p, num_passes)
            shard.close()
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load(table, store) -> None:
    """Replaces ``table``'s rows (and slots) on every server with those of the Keras file."""
    if _PREFIX in store or table.input_dim is None:
        load_beside(table, store)  # a dynamic table, or a file of an earlier release
        return
    dataset, rule, applies = keras_file.open_records(store, table.name, table.dim)
    num_slots, num_passes = _layout(table, rule)
    keras_file.check_rows(dataset, table.name, table.input_dim, num_slots)
    staging = _staging_dir(store, table.name)
    try:
        prefix = os.path.join(staging, "table")
        for p in range(num_passes):
            shard = _shard(table, rule, p, num_passes)
            keras_file.read_strided(dataset, shard.write_records, p, num_passes)
            shard.save(table_checkpoint.shard_path(prefix, p, num_passes))
            shard.close()
        table.restore(prefix, rule, applies)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
