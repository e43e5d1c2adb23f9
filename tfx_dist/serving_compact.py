"""Serving tables that do not fold into plain weights: the rows the store holds, looked up by id.

A dynamic table (``input_dim=None``) has no id range to copy, and a fixed
table over ``max_table_bytes`` is too large to copy densely. Both keep their
rows in tfx_dist's embedding store (on the parameter servers, or in this
process for a local dynamic table), which writes them, id by id, into the shard
files of a checkpoint (`custom_ops/embedding/core/checkpoint.h`). Serving reads
those files back (`written_rows`, by the store's own reader: a corrupt file is
an error naming it) and serves the table as `CompactRows`:

* ``ids``: the stored ids, sorted (int64 variable);
* ``rows``: their rows in the same order, then one default row of zeros
  (float32 variable ``[len(ids) + 1, output_dim]``).

A lookup is `tf.searchsorted` of the ids in ``ids`` and a `tf.gather` of
``rows``: TensorFlow's own ops and two variables, so the SavedModel holds the
rows as variables (no size limit of a graph's constants, as a
`tf.lookup.StaticHashTable` initialised from constants would have) and loads
in a process without tfx_dist. An id the store never held gets the zero row:
for a dynamic table an id never looked up during the job; for a fixed table a
row the store never allocated (its initial value, which the job would have
computed from tfx_dist's initializer, is not reproduced).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from tfx_dist.embedding import shard_file
from tfx_dist.parameter_server import table_checkpoint
from tfx_dist.tables.placement import Placement


def compact_refusal(layer) -> str | None:
    """Why ``layer``'s table cannot be served as `CompactRows`, or None."""
    table = layer.table
    if table.placement == Placement.ON_WORKERS:
        return (f"ShardedEmbedding '{layer.name}' is sharded over the workers; its compact form "
                "would need every worker's shard file in the chief's process, which serving does "
                "not gather: raise max_table_bytes to fold it into plain weights.")
    if not hasattr(table, "save"):
        return (f"ShardedEmbedding '{layer.name}' keeps its rows in a Keras variable of this "
                "process: raise max_table_bytes to fold it into plain weights.")
    return None


def written_rows(layer, folder: str | None = None):
    """(sorted int64 ids, float32 rows ``[n, output_dim]``) of every row the table's store holds.

    The store writes its shard files into a temporary folder under ``folder`` (on the parameter
    servers' side for tables there: a file system they share with this process, as for
    checkpoints), read here and removed. Call it on one process of the job (the chief).
    """
    scratch = tempfile.mkdtemp(prefix="tfx_serving_rows_", dir=folder)
    try:
        prefix = table_checkpoint.table_prefix(os.path.join(scratch, "rows"), layer.name,
                                               getattr(layer.table, "table_id", 0))
        layer.table.save(prefix)
        parts = [_stored_rows(path, layer) for path in table_checkpoint.shard_files(prefix, layer.name)]
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros([0], np.int64)
    rows = (np.concatenate([p[1] for p in parts]) if parts
            else np.zeros([0, layer.output_dim], np.float32))
    order = np.argsort(ids, kind="stable")
    ids, rows = ids[order], rows[order]
    if ids.size and np.any(ids[1:] == ids[:-1]):
        raise ValueError(f"ShardedEmbedding '{layer.name}': its store wrote an id twice")
    return ids, rows


def _stored_rows(path: str, layer):
    """(ids, values) of one shard file, read by the store's own reader (its checks and checksum)."""
    ids, values = shard_file.read_shard_file(path)
    if values.shape[1] != layer.output_dim:
        raise ValueError(f"ShardedEmbedding '{layer.name}': its store wrote rows of dim {values.shape[1]} "
                         f"into {path}, expected output_dim {layer.output_dim}")
    return ids, values


class CompactRows(tf.Module):
    """A table's stored rows for serving: ids sorted, looked up by `tf.searchsorted`; an id not
    among them gets the last row, zeros."""

    def __init__(self, name: str, ids: np.ndarray, rows: np.ndarray):
        super().__init__(name=f"{name}_served_compact_rows")
        dim = rows.shape[1]
        with tf.init_scope():
            self.ids = tf.Variable(ids.astype(np.int64), trainable=False, name="ids")
            self.rows = tf.Variable(np.concatenate([rows, np.zeros([1, dim], np.float32)]),
                                    trainable=False, name="rows")
        self.num_ids = int(ids.size)

    def lookup(self, unique_ids):
        unique_ids = tf.cast(unique_ids, tf.int64)
        if self.num_ids == 0:
            return tf.gather(self.rows, tf.zeros_like(unique_ids))
        at = tf.minimum(tf.searchsorted(self.ids, unique_ids, out_type=tf.int64), self.num_ids - 1)
        found = tf.equal(tf.gather(self.ids, at), unique_ids)
        return tf.gather(self.rows, tf.where(found, at, tf.cast(self.num_ids, tf.int64)))
