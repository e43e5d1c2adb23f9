"""What `ShardedEmbedding` makes of `keras.layers.Embedding`'s arguments, for any table.

A table on servers or sharded over workers is initialized by the embedding
store (uniform, normal, truncated normal, constant values) and trained there,
so the layer turns Keras's arguments into what every placement can apply:

* a variance-scaling initializer (``he_normal``, ``glorot_uniform``,
  ``lecun_normal``, ``VarianceScaling(...)``) becomes the plain distribution it
  draws from for the table's shape (fan in: ``input_dim``, fan out:
  ``output_dim``, as Keras computes them for ``Embedding``), with its seed, so a
  local table draws the same numbers as Keras's;
* ``embeddings_regularizer`` is applied to the rows a batch looks up (their
  distinct ids), not to every row of the table each step as
  ``keras.layers.Embedding`` does: a table of 10M rows cannot be read whole each
  step, and rows only move when looked up;
* a negative id ``-k`` (``k <= input_dim``) is row ``input_dim - k``, as Keras's
  layer takes it (dynamic tables: any int64 is an id of its own).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf


def table_initializer(initializer, input_dim: int | None, output_dim: int, layer_name: str):
    """``initializer`` (a Keras initializer) as one the store has, for a table of that shape."""
    if not isinstance(initializer, keras.initializers.VarianceScaling):
        return initializer
    # Attributes: subclasses (HeNormal, GlorotUniform...) leave them out of get_config().
    mode, scale, seed = initializer.mode, initializer.scale, initializer.get_config().get("seed")
    if input_dim is None and mode != "fan_out":
        raise ValueError(
            f"ShardedEmbedding '{layer_name}': {type(initializer).__name__} scales by the fan in "
            f"(mode={mode!r}), the number of rows, which a dynamic table (input_dim=None) does not "
            "have. Give input_dim, or use a fixed-scale initializer (RandomNormal(stddev=...)).")
    fan = {"fan_in": input_dim, "fan_out": output_dim,
           "fan_avg": ((input_dim or 0) + output_dim) / 2.0}[mode]
    scale /= max(1.0, fan)
    distribution = initializer.distribution
    if distribution == "truncated_normal":  # Keras's constant: the stddev of N(0, 1) cut at 2
        return keras.initializers.TruncatedNormal(0.0, math.sqrt(scale) / 0.87962566103423978, seed)
    if distribution == "untruncated_normal":
        return keras.initializers.RandomNormal(0.0, math.sqrt(scale), seed)
    limit = math.sqrt(3.0 * scale)
    return keras.initializers.RandomUniform(-limit, limit, seed)


def wrap_negative_ids(ids, input_dim: int | None):
    """Keras's reading of ids: ``-k`` is row ``input_dim - k`` (fixed tables only)."""
    if input_dim is None:
        return ids
    return tf.where(ids < 0, ids + input_dim, ids)


def drop_padding(flat_ids, segments):
    """The ids (and their examples) other than 0, for ``mask_zero=True`` with a combiner."""
    keep = tf.not_equal(flat_ids, 0)
    return tf.boolean_mask(flat_ids, keep), tf.boolean_mask(segments, keep)
