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

Supported: functional and Sequential models; tables of fixed size
(``input_dim``) whose rows fit in this process's memory (``max_table_bytes``);
dense ids (with a combiner: ``(batch, ids per example)``). Not done: dynamic
tables (``input_dim=None``: no id range for an Embedding; serve them from a
checkpoint with the job's servers, or in one process with a local dynamic
table), tables larger than one process's memory, ragged or sparse ids, and
subclassed models.

Call both on every worker of a job (tables sharded over the workers read
their rows together); every worker gets the same plain model, and only the
chief writes the export.
"""

from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

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
    for layer in tables.values():
        _check_copyable(layer, max_table_bytes)
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
    """Exports `to_plain_model(model)` as a SavedModel at ``path`` (`keras.Model.export`, endpoint
    ``serve``); the chief writes it. Returns the plain model. Raises as `to_plain_model`."""
    plain = to_plain_model(model, max_table_bytes)
    strategy = getattr(model, "_distribute_strategy", None) or tf.distribute.get_strategy()
    if getattr(strategy.extended, "should_checkpoint", True):
        plain.export(path, verbose=False)
    return plain


def table_rows(layer: ShardedEmbedding) -> np.ndarray:
    """Every row of a fixed-size table, ``[input_dim, output_dim]`` float32, whatever its placement
    (a collective for tables sharded over the workers: every worker calls it)."""
    rows = np.empty((layer.input_dim, layer.output_dim), np.float32)
    step = keras_file.chunk_rows(layer.output_dim)
    for start in range(0, layer.input_dim, step):
        ids = np.arange(start, min(start + step, layer.input_dim), dtype=np.int64)
        rows[ids] = np.asarray(layer.table.lookup(tf.constant(ids)))
    return rows


def _check_copyable(layer: ShardedEmbedding, max_table_bytes: int) -> None:
    if layer.input_dim is None:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' is a dynamic table (input_dim=None): it has no id range "
            "to copy into a keras.layers.Embedding, which to_plain_model does not do. Serve it with "
            "its servers, or in one process (a local dynamic table restored from a checkpoint).")
    size = layer.input_dim * layer.output_dim * 4
    if size > max_table_bytes:
        raise ValueError(
            f"ShardedEmbedding '{layer.name}' holds {size:,} bytes of rows, more than "
            f"max_table_bytes={max_table_bytes:,}: to_plain_model copies every row into this "
            "process's memory (twice). Raise max_table_bytes if it fits; a table larger than one "
            "process's memory cannot be served by a plain model.")
    if layer.combiner is not None:
        _ids_per_example(layer)


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
