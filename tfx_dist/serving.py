"""Serving what was trained: a plain Keras model, and a SavedModel that needs no tfx_dist.

A model trained with `ShardedEmbedding` tables on parameter servers or
sharded over the workers depends on the live job: its lookups are ops bound
to the servers' connections or to the workers' all-to-all. `to_plain_model`
copies it into a model of Keras's own layers, each table an ordinary
`keras.layers.Embedding` holding every row (``combiner="mean"`` adds
`keras.layers.GlobalAveragePooling1D`, ``"sum"`` and ``"sqrtn"`` a
`keras.layers.Rescaling` of that mean), and `export_for_serving` exports that
copy with `keras.Model.export`: a SavedModel that `tf.saved_model.load` and
TensorFlow Serving read in a process without tfx_dist or its op libraries.

Supported: functional and Sequential models (copied); subclassed models
(exported as they are, each table's lookup swapped for a gather from a copy of
its rows while `keras.Model.export` traces it: `served_tables`); tables of
fixed size (``input_dim``) whose rows fit in this process's memory
(``max_table_bytes``); in copies, dense ids (with a combiner: ``(batch, ids per
example)``). Dynamic tables (``input_dim=None``) and tables over
``max_table_bytes`` do not fold: `to_plain_model` refuses them (named), and
`export_for_serving` exports the model itself with each such table served as
`serving_compact.CompactRows` (the ids and rows its store holds; an id it does
not hold gets a row of zeros).

Call both on every worker of a job (tables sharded over the workers read
their rows together); every worker gets the same plain model, and only the
chief writes the export.
"""

from __future__ import annotations

import contextlib
import math
import os

import keras
import numpy as np
import tensorflow as tf

from tfx_dist.layers import row_ops
from tfx_dist import serving_compact
from tfx_dist.layers.sharded_embedding import ShardedEmbedding
from tfx_dist.tables import keras_file

# Tables larger than this are refused unless the caller raises it (the rows are copied twice:
# into NumPy, then into the Embedding's variable).
DEFAULT_MAX_TABLE_BYTES = 4 << 30


def to_plain_model(model: keras.Model, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> keras.Model:
    """A copy of ``model`` made of Keras's own layers, its tables ordinary Embedding weights.

    Args:
      model: a functional or Sequential Keras model, trained under any strategy or none.
      max_table_bytes: the largest table (rows x output_dim x 4 bytes) copied.

    Returns:
      A new, uncompiled `keras.Model` computing what ``model`` computes (up to float rounding of
      the combiners), with the same weights; each `ShardedEmbedding` is a layer (or a Sequential
      of layers) of the same name.

    Raises:
      ValueError: a dynamic table, a table over ``max_table_bytes``, a combiner with ids of
        another shape than ``(batch, ids per example)``, or a subclassed model.
    """
    tables = {layer.name: layer for layer in model._flatten_layers() if isinstance(layer, ShardedEmbedding)}
    _check_copyable_all(list(tables.values()), max_table_bytes)
    try:
        plain = keras.models.clone_model(model, clone_function=_plain_layer)
    except ValueError as e:
        raise ValueError(f"to_plain_model copies functional and Sequential models: {e}") from None
    for layer in model.layers:
        if not layer.weights:  # nothing to copy (the clone may rename an unnamed Input)
            continue
        target = plain.get_layer(layer.name)
        if isinstance(layer, ShardedEmbedding):
            target.set_weights([table_rows(layer)])
        else:
            target.set_weights(layer.get_weights())
    return plain


def export_for_serving(model: keras.Model, path: str, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES):
    """Exports ``model`` for serving as a SavedModel at ``path`` (`keras.Model.export`, endpoint
    ``serve``) that needs neither tfx_dist nor a live job; the chief writes it.

    A functional or Sequential model whose tables all fold into plain weights is exported as
    `to_plain_model(model)`, which is returned. Any other model (subclassed, or with a dynamic
    table or one over ``max_table_bytes``) is exported itself, under `served_tables`, and
    returned: tables that fold are gathers from a copy of their rows, the others `CompactRows`
    (the rows their store holds, looked up by id; an id it does not hold gets zeros). Call it
    outside ``strategy.scope()``, on every worker.

    Raises:
      ValueError: a table neither form serves (named, with why), or combined ids of another
        shape than ``(batch, ids per example)`` in a copy.
    """
    strategy = getattr(model, "_distribute_strategy", None) or tf.distribute.get_strategy()
    writes = getattr(strategy.extended, "should_checkpoint", True)
    refused = servable_tables(model, max_table_bytes)
    if _is_copyable_graph(model) and not any(refused.values()):
        plain = to_plain_model(model, max_table_bytes)
        if writes:
            with row_ops.tensorflow_ops_only():
                plain.export(path, verbose=False)
        return plain
    folder = os.path.dirname(os.path.abspath(path))
    if writes:
        os.makedirs(folder, exist_ok=True)
    with served_tables(model, max_table_bytes, rows_folder=folder if writes else None):
        if writes:
            with row_ops.tensorflow_ops_only():
                model.export(path, verbose=False)
    return model


@contextlib.contextmanager
def served_tables(model: keras.Model, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES,
                  rows_folder: str | None = ""):
    """Within it, each `ShardedEmbedding` of ``model`` looks its rows up in a copy of them, plain
    `tf.Variable`s (nothing of tfx_dist's, nothing bound to the job); its own table is back
    afterwards. A table that folds into plain weights is a gather from all its rows (read on
    entry: a collective for tables sharded over workers); a dynamic table or one over
    ``max_table_bytes`` is `serving_compact.CompactRows`, whose store writes its rows into a
    temporary folder under ``rows_folder`` ("": the system's; None: such tables keep their own
    table, for a worker that reads but does not export)."""
    layers = [layer for layer in model._flatten_layers() if isinstance(layer, ShardedEmbedding)]
    compact = {layer.name for layer in layers if _refusal(layer, max_table_bytes)}
    _check_copyable_all([layer for layer in layers if layer.name not in compact], max_table_bytes,
                        combined_here=False, also_refused=[serving_compact.compact_refusal(layer)
                                                           for layer in layers if layer.name in compact])
    originals = [(layer, layer.table) for layer in layers]
    try:
        for layer in layers:
            if layer.name not in compact:
                _set_table(layer, _ServedRows(layer.name, table_rows(layer)))
            elif rows_folder is not None:
                ids, rows = serving_compact.written_rows(layer, rows_folder or None)
                _set_table(layer, serving_compact.CompactRows(layer.name, ids, rows))
        yield
    finally:
        for layer, table in originals:
            _set_table(layer, table)


class _ServedRows(tf.Module):
    """A table's rows for serving: a gather from one variable."""

    def __init__(self, name: str, rows: np.ndarray):
        super().__init__(name=f"{name}_served_rows")
        with tf.init_scope():
            self.rows = tf.Variable(rows, trainable=False, name="rows")

    def lookup(self, unique_ids):
        return tf.gather(self.rows, unique_ids)


def _set_table(layer, table) -> None:
    tracker = getattr(layer, "_tracker", None)
    locked = bool(getattr(tracker, "locked", False))
    if locked:
        tracker.unlock()  # Keras locks a built layer's state; this is not a new weight
    layer.table = table
    if locked:
        tracker.lock()


def _is_copyable_graph(model) -> bool:
    """Functional and Sequential models (`keras.models.clone_model` copies them)."""
    return isinstance(model, keras.Sequential) or hasattr(model, "_nodes_by_depth")


def table_rows(layer: ShardedEmbedding) -> np.ndarray:
    """Every row of a fixed-size table, ``[input_dim, output_dim]`` float32, whatever its placement
    (a collective for tables sharded over the workers: every worker calls it)."""
    rows = np.empty((layer.input_dim, layer.output_dim), np.float32)
    step = keras_file.chunk_rows(layer.output_dim)
    for start in range(0, layer.input_dim, step):
        ids = np.arange(start, min(start + step, layer.input_dim), dtype=np.int64)
        rows[ids] = np.asarray(layer.table.lookup(tf.constant(ids)))
    return rows


def servable_tables(model: keras.Model, max_table_bytes: int = DEFAULT_MAX_TABLE_BYTES) -> dict:
    """Which of ``model``'s `ShardedEmbedding` tables serving folds into plain weights.

    Returns ``{layer name: None}`` for a table that becomes plain weights, ``{layer name: why
    not}`` for one that does not (a dynamic table, one over ``max_table_bytes``: `export_for_serving`
    serves those as `serving_compact.CompactRows`), in layer order. Reads no rows.
    """
    return {layer.name: _refusal(layer, max_table_bytes)
            for layer in model._flatten_layers() if isinstance(layer, ShardedEmbedding)}


def _check_copyable_all(layers, max_table_bytes: int, combined_here: bool = True,
                        also_refused=()) -> None:
    """Raises one ValueError naming every table serving cannot fold, and those it can."""
    refused = {layer.name: _refusal(layer, max_table_bytes) for layer in layers}
    reasons = [why for why in refused.values() if why] + [why for why in also_refused if why]
    if reasons:
        folded = [name for name, why in refused.items() if not why]
        raise ValueError(
            f"tfx_dist.serving folds {len(folded)} of {len(refused) + len(also_refused)} tables "
            f"into plain weights ({', '.join(repr(n) for n in folded) or 'none'}); not these: "
            + " ".join(reasons))
    for layer in layers:
        if layer.combiner is not None and combined_here:
            _ids_per_example(layer)


def _refusal(layer: ShardedEmbedding, max_table_bytes: int) -> str | None:
    """Why ``layer``'s table cannot become plain weights, or None."""
    if layer.input_dim is None:
        where = getattr(getattr(layer.table, "placement", None), "value", "not built")
        return (f"ShardedEmbedding '{layer.name}' ({where}) is a dynamic table "
                f"(input_dim=None, rows of {layer.output_dim} floats created on first lookup): it has "
                "no id range to copy into plain weights, and the initial rows of ids it has not seen "
                "are computed by tfx_dist's store, which plain TensorFlow cannot do. export_for_serving "
                "serves it as compact rows (the ids its store holds; any other id gets zeros).")
    size = layer.input_dim * layer.output_dim * 4
    if size > max_table_bytes:
        return (f"ShardedEmbedding '{layer.name}' ({layer.input_dim:,} x {layer.output_dim}) holds "
                f"{size:,} bytes of rows, more than max_table_bytes={max_table_bytes:,}: serving copies "
                "every row into this process's memory (twice). Raise max_table_bytes if it fits; a "
                "table larger than that is served by export_for_serving as compact rows (the rows its "
                "store holds; any other id gets zeros).")
    return None


def _ids_per_example(layer: ShardedEmbedding) -> int:
    shape = getattr(layer, "_build_shapes_dict", None) or {}
    (input_shape,) = shape.values() if len(shape) == 1 else (None,)
    if input_shape is None or len(input_shape) != 2 or input_shape[1] is None:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' (combiner={layer.combiner!r}) was built for ids of "
            f"shape {input_shape}; to_plain_model combines dense ids of shape (batch, ids per "
            "example) only (not ragged, sparse or variable-length ids).")
    return int(input_shape[1])


def _plain_layer(layer):
    """Keras's own layers for a `ShardedEmbedding`; a fresh copy of any other layer."""
    if not isinstance(layer, ShardedEmbedding):
        return layer.__class__.from_config(layer.get_config())
    embedding = keras.layers.Embedding(layer.input_dim, layer.output_dim,
                                       name=layer.name if layer.combiner is None else "embedding")
    if layer.combiner is None:
        return embedding
    steps = [embedding, keras.layers.GlobalAveragePooling1D(name="mean")]
    per_example = _ids_per_example(layer)
    if layer.combiner != "mean":  # the sum, or the sum / sqrt(count), from the mean
        scale = per_example if layer.combiner == "sum" else math.sqrt(per_example)
        steps.append(keras.layers.Rescaling(scale, name=layer.combiner))
    return keras.Sequential(steps, name=layer.name)
