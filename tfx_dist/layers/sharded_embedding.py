"""`tfx_dist.layers.ShardedEmbedding`: an embedding layer whose table may live elsewhere.

Under a tfx_dist strategy with parameter servers the table's rows live on the
servers, sharded by row; with no such strategy the layer keeps a local table,
so the same model runs on a laptop. Either way the layer does the same work
around the table: it flattens dense, ragged or sparse ids, deduplicates them
(one row fetched, and one gradient row pushed, per distinct id), and combines
multi-hot rows with ``sum``, ``mean`` or ``sqrtn``. Where the rows come from is
the job of a *table* object (`tfx_dist.tables`), chosen when
the layer is built.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.layers import keras_arguments, row_ops
from tfx_dist.tables import keras_file, local, optimizer_state

_COMBINERS = (None, "sum", "mean", "sqrtn")
_PLACEMENTS = (None, "sharded", "replicated")


# Registered so that keras.models.load_model finds the class by the name a .keras file records.
@keras.saving.register_keras_serializable(package="tfx_dist")
class ShardedEmbedding(keras.layers.Layer):
    """Maps integer ids to dense vectors, from a table that may be sharded.

    A drop-in for `keras.layers.Embedding` in recommender models: with
    ``combiner=None`` it maps ids of any shape ``S`` to vectors of shape
    ``S + (output_dim,)``. With a combiner, each example's ids (the last
    axis of a dense batch, a row of a `tf.RaggedTensor`, or a row of a 2-D
    `tf.SparseTensor`) are combined into one vector of shape
    ``(batch, output_dim)``: ``"sum"``, ``"mean"`` (sum / count) or
    ``"sqrtn"`` (sum / sqrt(count)); an example with no ids gets zeros.

    Example:
    ```python
    ids = keras.Input((5,), dtype="int64")            # 5 categories per example
    x = tfx_dist.layers.ShardedEmbedding(1_000_000, 32, combiner="mean")(ids)
    ```

    Args:
      input_dim: number of rows: ids must lie in ``[0, input_dim)``.
        ``None`` makes a dynamic table (any int64 id, rows created on first
        lookup): on parameter servers, or in this process without them.
      output_dim: length of each row.
      combiner: ``None``, ``"sum"``, ``"mean"`` or ``"sqrtn"``.
      embeddings_initializer: initializer of the rows, any of Keras's but
        ``Orthogonal`` and ``Identity`` (a local table uses Keras's values;
        parameter servers and sharded tables a deterministic function of the
        row id with the same distribution). Variance scaling (``he_normal``,
        ...) scales by the table's shape, as for `keras.layers.Embedding`.
      embeddings_regularizer: a Keras regularizer of the rows each batch
        looks up (`keras.layers.Embedding` penalizes every row each step).
      embeddings_constraint: a Keras constraint, for tables kept in a Keras
        variable (no strategy, replicated); a table on servers or sharded
        over workers refuses it when built.
      mask_zero: id 0 is padding: without a combiner the layer outputs Keras's
        mask (``ids != 0``); with one, 0s are left out of each example's
        combination.
      placement: where `tfx_dist.HybridStrategy` keeps the table: ``"sharded"``
        (rows spread over the workers), ``"replicated"`` (a whole copy on
        every worker, its gradient all-reduced) or ``None`` (by size: see
        ``TFX_HYBRID_SHARD_MIN_BYTES``). Other strategies ignore it.
      **kwargs: the usual Keras layer arguments (``name``, ``dtype``...).

    Raises:
      ValueError: bad arguments, or a dynamic table under several replicas without servers.
    """

    def __init__(self, input_dim: int | None, output_dim: int, combiner: str | None = None,
                 embeddings_initializer="uniform", placement: str | None = None,
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero: bool = False,
                 **kwargs):
        super().__init__(**kwargs)
        if input_dim is not None and (not isinstance(input_dim, int) or input_dim < 1):
            raise ValueError(f"Expected `input_dim` to be a positive int or None. Received: "
                             f"input_dim={input_dim!r}")
        if not isinstance(output_dim, int) or output_dim < 1:
            raise ValueError(f"Expected `output_dim` to be a positive int. Received: "
                             f"output_dim={output_dim!r}")
        if combiner not in _COMBINERS:
            raise ValueError(f"Expected `combiner` to be one of {_COMBINERS}. Received: "
                             f"combiner={combiner!r}")
        if placement not in _PLACEMENTS:
            raise ValueError(f"Expected `placement` to be one of {_PLACEMENTS}. Received: "
                             f"placement={placement!r}")
        self.placement = placement
        self.input_dim = input_dim
        self.output_dim = output_dim
        self.combiner = combiner
        # As given (get_config), and as the tables apply it (keras_arguments).
        self.keras_initializer = keras.initializers.get(embeddings_initializer)
        self.embeddings_initializer = keras_arguments.table_initializer(
            self.keras_initializer, input_dim, output_dim, self.name)
        self.embeddings_regularizer = keras.regularizers.get(embeddings_regularizer)
        self.embeddings_constraint = keras.constraints.get(embeddings_constraint)
        self.mask_zero = mask_zero
        self.supports_masking = mask_zero
        self.table = None

    def build(self, input_shape=None):
        self.table = local.create(self)
        optimizer_state.install()  # Keras files of other placements load with compile=True
        if self.embeddings_constraint is not None and not self.table.placement.in_keras_variable:
            raise ValueError(
                f"ShardedEmbedding '{self.name}': embeddings_constraint applies to a table in a "
                f"Keras variable; this one is {self.table.placement.value}, updated where it "
                "lives. Drop the constraint, or keep the table replicated.")
        self.built = True

    def call(self, inputs):
        flat_ids, segments, num_segments, id_shape = _flatten(inputs, self.combiner)
        flat_ids = keras_arguments.wrap_negative_ids(flat_ids, self.input_dim)
        if self.mask_zero and self.combiner is not None:
            flat_ids, segments = keras_arguments.drop_padding(flat_ids, segments)
        unique_ids, position = tf.unique(flat_ids)
        if tfc.building_symbolically():  # Keras learns shapes (subclassed models): read no table
            found = tf.zeros([tf.size(unique_ids), self.output_dim], self.compute_dtype)
        else:
            found = self.table.lookup(unique_ids)
        if self.embeddings_regularizer is not None:
            self.add_loss(self.embeddings_regularizer(found))
        rows = _expand(found, position)
        if self.combiner is None:
            return tf.reshape(rows, tf.concat([id_shape, [self.output_dim]], axis=0))
        return _combine(rows, segments, num_segments, self.combiner)

    def save_own_variables(self, store):
        # The table's entries only (`tfx_dist.tables.keras_file`): the same whatever the
        # placement, so a file saved under one strategy loads under any other.
        self.table.save_to_keras_store(store)

    def load_own_variables(self, store):
        if "0" in store and not keras_file.holds_table(store) and "tfx_ps_shard_prefix" not in store:
            super().load_own_variables(store)  # a file of an earlier release: Keras's own entries
            return
        self.table.load_from_keras_store(store)

    def compute_mask(self, inputs, mask=None):
        if not self.mask_zero or self.combiner is not None:
            return None
        return tf.not_equal(inputs, 0)

    def compute_output_shape(self, input_shape):
        if self.combiner is None:
            return tuple(input_shape) + (self.output_dim,)
        return (input_shape[0], self.output_dim)

    def get_config(self):
        config = super().get_config()
        config.update(input_dim=self.input_dim, output_dim=self.output_dim, combiner=self.combiner,
                      placement=self.placement, mask_zero=self.mask_zero,
                      embeddings_initializer=keras.initializers.serialize(self.keras_initializer),
                      embeddings_regularizer=keras.regularizers.serialize(self.embeddings_regularizer),
                      embeddings_constraint=keras.constraints.serialize(self.embeddings_constraint))
        return config


def _flatten(inputs, combiner):
    """(flat int64 ids, example of each id, number of examples, shape of the ids)."""
    if isinstance(inputs, tf.SparseTensor):
        if combiner is None:
            raise ValueError("ShardedEmbedding needs a `combiner` for tf.SparseTensor ids.")
        return (tf.cast(inputs.values, tf.int64), inputs.indices[:, 0], inputs.dense_shape[0],
                None)
    if isinstance(inputs, tf.RaggedTensor):
        if combiner is None:
            raise ValueError("ShardedEmbedding needs a `combiner` for tf.RaggedTensor ids.")
        if inputs.ragged_rank != 1:
            raise ValueError(f"Expected ragged ids of shape (batch, None). Received: ragged_rank="
                             f"{inputs.ragged_rank}")
        return (tf.cast(inputs.flat_values, tf.int64), inputs.value_rowids(), inputs.nrows(),
                None)
    ids = tf.convert_to_tensor(inputs)
    if ids.dtype.is_floating:  # as keras.layers.Embedding (Keras traces subclassed models in float)
        ids = tf.cast(ids, tf.int64)
    elif not ids.dtype.is_integer:
        raise TypeError(f"ShardedEmbedding expects integer ids. Received: dtype={ids.dtype.name}")
    ids = tf.cast(ids, tf.int64)
    id_shape = tf.shape(ids, out_type=tf.int64)
    flat = tf.reshape(ids, [-1])
    if combiner is None:
        return flat, None, None, id_shape
    per_example = id_shape[-1]
    num_examples = tf.size(flat, out_type=tf.int64) // tf.maximum(per_example, 1)
    segments = tf.range(tf.size(flat, out_type=tf.int64)) // tf.maximum(per_example, 1)
    return flat, segments, num_examples, id_shape


@tf.custom_gradient
def _expand(unique_rows, position):
    """``tf.gather(unique_rows, position)``, whose gradient sums the positions' gradients per
    distinct id with `row_ops.sum_rows_by_index`: TensorFlow's own gradient of the gather
    (IndexedSlices, made dense later) is slower, and this sum is on every training step's
    critical path (benchmarks/ps_profile.py)."""
    def grad(d_rows):
        num_ids = tf.shape(unique_rows, out_type=position.dtype)[0]
        return row_ops.sum_rows_by_index(d_rows, position, num_ids), None

    return tf.gather(unique_rows, position), grad


def _combine(rows, segments, num_segments, combiner):
    total = row_ops.sum_rows_by_index(rows, segments, num_segments)
    if combiner == "sum":
        return total
    count = tf.math.unsorted_segment_sum(tf.ones_like(segments, rows.dtype), segments,
                                         num_segments)
    scale = count if combiner == "mean" else tf.sqrt(count)
    return total / tf.maximum(scale, 1.0)[:, None]
