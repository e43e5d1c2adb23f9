"""A table sharded over the workers in Keras's one-file saves (`save_weights`, `model.save`).

The table goes *into* the chief's file, whole, in the one format of every
placement (`tfx_dist.tables.keras_file`): the file is complete on its own (it
can be copied, zipped into a ``.keras``, read from memory by
`keras.models.load_model`) and loads under any placement and into any number
of workers, each reading only its rows (``id % N == rank``).

Saving, every worker reads its rows of a chunk from its store and sends them
to the chief (one all-to-all per chunk, under the runtime's timeout), which
interleaves them into the chunk and writes it to the file; the other workers'
files (Keras's multi-worker convention: a temporary file) get no rows. So
every worker must save (as Keras's callbacks do); a save on the chief alone
waits for the others until ``TFX_TIMEOUT_S``, then fails. Loading, each worker
reads its own rows of the file chunk by chunk (a strided HDF5 read) and writes
them into its store; no collective.
"""

from __future__ import annotations

import numpy as np

from tfx_dist.tables import keras_file


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
        dataset = keras_file.create(store, table.name, table.input_dim, record_shape, table.optimizer_rule)
    else:
        keras_file.note_not_writer(store, f"worker rank {rank}")
    step = keras_file.chunk_rows(int(np.prod(record_shape)))
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
    dataset, rule, _ = keras_file.open_records(store, table.name, table.dim)
    table._set_rule(rule)
    keras_file.check_rows(dataset, table.name, table.input_dim, table.shard.num_slots)
    keras_file.read_strided(dataset, table.shard.write_records, table.rank, table.num_workers)
