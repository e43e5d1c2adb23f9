"""The one Keras file format of a `ShardedEmbedding` table, whatever its placement.

Keras writes a model's variables into one HDF5 file (``.weights.h5``, alone or
inside a ``.keras`` zip) through each layer's ``save_own_variables(store)``.
Every table with a fixed ``input_dim`` (local, replicated, sharded over the
workers or on parameter servers) writes the same entries there:

* ``tfx_table_records``: float32 ``[input_dim, 1 + slots, output_dim]``, row
  ``id`` at index ``id``, each row's value then its optimizer slots (the
  embedding store's record; a table in a Keras variable has no slots here:
  Keras's optimizer saves its own);
* ``tfx_table_optimizer``: the store rule those slots belong to (JSON text,
  empty for none);
* ``tfx_table_applies``: the optimizer's step count kept beside the rows
  (the parameter servers' count for Adam; 0 elsewhere).

So a file saved under one placement loads under any other (ParameterServerStrategy,
HybridStrategy, or no strategy for serving), into any number of workers or
servers. A file written by a worker that is not the chief holds
``tfx_table_writer`` instead (its rows are in the chief's file).

Memory stays bounded: rows travel in chunks of at most ``CHUNK_BYTES`` of
records, written and read as strided HDF5 slices (``id % N == r``).
"""

from __future__ import annotations

import numpy as np

from tfx_dist.embedding import store as store_lib
from tfx_dist.parameter_server import table_checkpoint

# The most bytes of records a process holds per chunk (one chunk at a time).
CHUNK_BYTES = 16 << 20
RECORDS, OPTIMIZER, APPLIES, WRITER = ("tfx_table_records", "tfx_table_optimizer",
                                       "tfx_table_applies", "tfx_table_writer")
# The same layout under the names HybridStrategy's files had before it was every placement's.
_EARLIER_NAMES = {RECORDS: "tfx_hybrid_records", OPTIMIZER: "tfx_hybrid_optimizer",
                  WRITER: "tfx_hybrid_writer"}


def text_entry(value: str) -> np.ndarray:
    """``value`` as a Keras store entry (HDF5 entries hold arrays): its UTF-8 bytes, uint8."""
    return np.frombuffer(value.encode("utf-8"), dtype=np.uint8).copy()


def read_text_entry(store, key: str) -> str:
    """The text that `text_entry` put in ``store[key]``."""
    return bytes(np.asarray(store[key], dtype=np.uint8)).decode("utf-8")


def chunk_rows(record_floats: int) -> int:
    return max(1, CHUNK_BYTES // (4 * record_floats))


def entry_group(store, table_name: str):
    """The h5py group of the layer's entry (Keras's store loads whole datasets: we slice)."""
    group = getattr(store, "_h5_entry_group", None)
    if group is None or not hasattr(group, "create_dataset"):
        raise ValueError(
            f"ShardedEmbedding '{table_name}': its table is streamed into Keras's HDF5 file, but "
            f"this save or load uses a {type(store).__name__} store without one (tested with "
            "Keras 3.15's H5IOStore).")
    return group


def _key(group, key: str) -> str | None:
    for name in (key, _EARLIER_NAMES.get(key)):
        if name is not None and name in group:
            return name
    return None


def holds_table(store) -> bool:
    """Whether ``store`` (a layer's entry) was written in this format."""
    group = getattr(store, "_h5_entry_group", None)
    return group is not None and any(_key(group, k) for k in (RECORDS, WRITER))


def create(store, table_name: str, input_dim: int, record_shape, rule=None, applies: int = 0):
    """The records dataset of a table, with its optimizer rule and step count (the writer's)."""
    dataset = entry_group(store, table_name).create_dataset(
        RECORDS, shape=(input_dim,) + tuple(record_shape), dtype="float32")
    store[OPTIMIZER] = text_entry(table_checkpoint.encode_optimizer(rule))
    store[APPLIES] = np.asarray(applies, dtype=np.int64)
    return dataset


def note_not_writer(store, rank_text: str) -> None:
    """A non-chief's (temporary) file: it says where the rows are."""
    store[WRITER] = text_entry(f"{rank_text}: the rows are in the chief's file only")


def open_records(store, table_name: str, dim: int):
    """(records dataset, store rule or SGD, applies) of the table in ``store``.

    Raises:
      ValueError: no rows of a table here (a non-chief's file, another format), or rows of
        another width.
    """
    group = entry_group(store, table_name)
    records = _key(group, RECORDS)
    if records is None:
        if _key(group, WRITER):
            raise ValueError(
                f"ShardedEmbedding '{table_name}': this Keras file was written by a worker that "
                "is not the chief; its table rows are in the chief's file. Load the chief's file.")
        raise ValueError(f"ShardedEmbedding '{table_name}': this Keras file holds no rows of the "
                         "table (it was not saved from a model with this ShardedEmbedding).")
    dataset = group[records]
    if dataset.ndim != 3 or dataset.shape[2] != dim:
        raise ValueError(f"ShardedEmbedding '{table_name}': the Keras file holds records of shape "
                         f"{tuple(dataset.shape)} (rows, value + slots, dim); this table has "
                         f"dim {dim}.")
    # Saved before any training, or from a Keras variable: plain values (SGD has no slots).
    rule = table_checkpoint.decode_optimizer(read_text_entry(store, _key(group, OPTIMIZER)))
    applies = int(np.asarray(store[APPLIES])) if APPLIES in group else 0
    return dataset, rule or store_lib.SGD(), applies


def check_rows(dataset, table_name: str, input_dim: int, num_slots: int) -> None:
    expected = (input_dim, 1 + num_slots)
    if tuple(dataset.shape[:2]) != expected:
        raise ValueError(f"ShardedEmbedding '{table_name}': the Keras file holds records of shape "
                         f"{tuple(dataset.shape)} (rows, value + slots, dim); this table needs "
                         f"{expected + (dataset.shape[2],)}.")


def write_strided(dataset, read_records, shard: int, num_shards: int) -> None:
    """Writes rows ``id % num_shards == shard`` of ``dataset``, chunk by chunk, from
    ``read_records(ids)``."""
    step = max(num_shards, chunk_rows(int(np.prod(dataset.shape[1:]))) * num_shards)
    for start in range(shard, dataset.shape[0], step):
        stop = min(start + step, dataset.shape[0])
        dataset[start:stop:num_shards] = read_records(np.arange(start, stop, num_shards, dtype=np.int64))


def read_strided(dataset, write_records, shard: int, num_shards: int) -> None:
    """Reads rows ``id % num_shards == shard`` of ``dataset`` chunk by chunk into
    ``write_records(ids, records)``."""
    step = max(num_shards, chunk_rows(int(np.prod(dataset.shape[1:]))) * num_shards)
    for start in range(shard, dataset.shape[0], step):
        stop = min(start + step, dataset.shape[0])
        write_records(np.arange(start, stop, num_shards, dtype=np.int64), dataset[start:stop:num_shards])
