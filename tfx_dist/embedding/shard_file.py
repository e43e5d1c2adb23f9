"""Reading one shard file of a table checkpoint without a table, by the store's own reader.

A table's store writes its rows, id by id, into shard files
(`custom_ops/embedding/core/checkpoint.h`); serving reads them back into plain
arrays. The reading is libtfx_embedding's (``tfx_emb_read_shard_file``): the
same checks as a restore (header, ids, record count, checksum), so a corrupt
file is an error naming it, never rows served from it.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np

from tfx_dist.embedding import _native


def read_shard_file(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
    """(ids, values) of every record of one shard file, in file order: int64 ``[n]`` and float32
    ``[n, dim]`` (the optimizer slots left out).

    Raises:
      tfx_dist.embedding.store.DataLossError: the file is truncated or corrupt (named).
      tfx_dist.embedding.store.NotFoundError: it cannot be opened.
      tfx_dist.embedding.store.FailedPreconditionError: it changed while being read.
    """
    lib, encoded = _native.lib(), os.fsencode(path)
    dim, records = ctypes.c_int64(0), ctypes.c_int64(0)
    _native.call(lib.tfx_emb_shard_file_shape, encoded, ctypes.byref(dim), ctypes.byref(records))
    ids = np.empty([records.value], np.int64)
    values = np.empty([records.value, dim.value], np.float32)
    _native.call(lib.tfx_emb_read_shard_file, encoded, dim.value, records.value,
                 ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                 values.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
    return ids, values
