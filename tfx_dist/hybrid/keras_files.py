"""A table sharded over the workers in Keras's one-file saves (`save_weights`, `model.save`).

Keras writes a model's variables into one HDF5 file (``.weights.h5``, alone or
inside a ``.keras`` zip) through each layer's ``save_own_variables(store)``.
Unlike a parameter-server table (`tfx_dist.parameter_server.keras_files`,
whose servers write shard files beside the Keras file), a table sharded over
the workers goes *into* that file, whole: the layer's HDF5 entry gets

* ``tfx_hybrid_records``: float32 ``[input_dim, 1 + slots, output_dim]``, row
  ``id`` at index ``id`` (global-id order), each row's value then its
  optimizer slots (the embedding store's record);
* ``tfx_hybrid_optimizer``: the store rule those slots belong to (JSON text).

So the file is complete on its own (it can be copied, zipped into a
``.keras``, read from memory by `keras.models.load_model`) and restores into
any number of workers, each reading only its rows (``id % N == rank``).

Memory stays bounded: rows travel in chunks of at most ``CHUNK_BYTES`` of
records. Saving, every worker reads its rows of a chunk from its store and
sends them to the chief (one all-to-all per chunk, under the runtime's
timeout), which interleaves them into the chunk and writes it to the file; the
other workers' files (Keras's multi-worker convention: a temporary file) get
no rows. So every worker must save (as Keras's callbacks do); a save on the
chief alone waits for the others until ``TFX_TIMEOUT_S``, then fails. Loading,
each worker reads its own rows of the file chunk by chunk (a strided HDF5
read) and writes them into its store; no collective.
"""

from __future__ import annotations

import numpy as np

from tfx_dist.embedding import store as store_lib
from tfx_dist.parameter_server import table_checkpoint
from tfx_dist.parameter_server.keras_files import read_text_entry, text_entry

# The most bytes of records a process holds per chunk (one chunk at a time).
CHUNK_BYTES = 16 << 20
_RECORDS, _OPTIMIZER, _WRITER = "tfx_hybrid_records", "tfx_hybrid_optimizer", "tfx_hybrid_writer"


def chunk_rows(record_floats: int) -> int:
    return max(1, CHUNK_BYTES // (4 * record_floats))


def _entry_group(store, table_name: str):
    """The h5py group of the layer's entry (Keras's store loads whole datasets: we slice)."""
    group = getattr(store, "_h5_entry_group", None)
    if group is None or not hasattr(group, "create_dataset"):
        raise ValueError(
            f"ShardedEmbedding '{table_name}': its table is sharded over the workers and is "
            f"streamed into Keras's HDF5 file, but this save or load uses a {type(store).__name__} "
            "store without one (tested with Keras 3.15's H5IOStore).")
    return group


def _chief_rank(table) -> int:
    """The rank whose file gets the rows (every worker learns it: one tiny all-gather)."""
    flags = table._communicator.allgather_numpy(
        np.array([1 if table._is_chief() else 0], np.int32), name=f"tfx_keras_save/{table.name}/chief")
    chiefs = np.flatnonzero(flags)
    if len(chiefs) != 1:
        raise RuntimeError(f"ShardedEmbedding '{table.name}': expected one chief among the workers "
                           f"saving the table, found ranks {chiefs.tolist()}")
    return int(chiefs[0])


def save(table, store) -> None:
    """Writes ``table``'s rows and slots, every worker's, into the chief's Keras file.

    Called on every worker (a collective when there are several).
    """
    n, rank = table.num_workers, table.rank
    chief = _chief_rank(table) if n > 1 else rank
    shard = table.shard
    record_shape = (1 + shard.num_slots, table.dim)
    dataset = None
    if rank == chief:
        group = _entry_group(store, table.name)
        dataset = group.create_dataset(_RECORDS, shape=(table.input_dim,) + record_shape,
                                       dtype="float32")
        store[_OPTIMIZER] = text_entry(table_checkpoint.encode_optimizer(table._optimizer))
    else:  # a non-chief's (temporary) file: it says where the rows are
        store[_WRITER] = text_entry(f"worker rank {rank}: the rows are in the chief's file only")
    step = chunk_rows(int(np.prod(record_shape)))
    step -= step % n  # whole rounds of owners: every chunk starts at an id owned by rank 0
    step = max(step, n)
    for start in range(0, table.input_dim, step):
        stop = min(start + step, table.input_dim)
        records = shard.read_records(np.arange(start + rank, stop, n, dtype=np.int64))
        if n > 1:
            splits = np.zeros(n, np.int64)
            splits[chief] = len(records)
            records, received = table._communicator.alltoall_numpy(
                records, splits, name=f"tfx_keras_save/{table.name}/rows")
        if dataset is None:
            continue
        chunk = np.empty((stop - start,) + record_shape, np.float32)
        offset = 0
        for owner in range(n):  # rank `owner`'s rows: ids start + owner, + n, ...
            count = len(range(start + owner, stop, n))
            chunk[owner::n] = records[offset:offset + count]
            offset += count
        dataset[start:stop] = chunk


def load(table, store) -> None:
    """Replaces this worker's rows (and slots) with its share of the file's rows."""
    group = _entry_group(store, table.name)
    if _RECORDS not in group:
        if _WRITER in group:
            raise ValueError(
                f"ShardedEmbedding '{table.name}': this Keras file was written by a worker that "
                "is not the chief; its table rows are in the chief's file. Load the chief's file.")
        raise ValueError(
            f"ShardedEmbedding '{table.name}': this Keras file holds no rows of a table sharded "
            "over the workers (it was not saved from a model with this table sharded by "
            "HybridStrategy; replicated and sharded placements do not share a file format).")
    dataset = group[_RECORDS]
    # Saved before any training: plain values (SGD has no slots).
    rule = table_checkpoint.decode_optimizer(read_text_entry(store, _OPTIMIZER)) or store_lib.SGD()
    table._set_rule(rule)
    shard = table.shard
    expected = (table.input_dim, 1 + shard.num_slots, table.dim)
    if tuple(dataset.shape) != expected:
        raise ValueError(
            f"ShardedEmbedding '{table.name}': the Keras file holds records of shape "
            f"{tuple(dataset.shape)} (rows, value + slots, dim); this table needs {expected}.")
    n, rank = table.num_workers, table.rank
    step = max(n, chunk_rows(expected[1] * expected[2]) * n)  # ids of the file per chunk
    for start in range(rank, table.input_dim, step):
        stop = min(start + step, table.input_dim)
        shard.write_records(np.arange(start, stop, n, dtype=np.int64), dataset[start:stop:n])
