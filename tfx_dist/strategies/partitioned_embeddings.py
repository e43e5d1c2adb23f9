"""A `keras.layers.Embedding` that TensorFlow's partitioner would split becomes a server table.

Programs written for TensorFlow's ``ParameterServerStrategy(variable_partitioner=...)``
expect a large ``keras.layers.Embedding`` to be sharded over the servers with
no change to the model. Keras's own layer reads its whole table each step, so
it cannot keep a Keras variable there; instead, when such a layer is built
under `tfx_dist.ParameterServerStrategy` and the strategy's partitioner splits
its ``(input_dim, output_dim)`` float32 table into more than one shard, the
layer becomes a `tfx_dist.layers.ShardedEmbedding` with the same arguments
(``combiner=None``): its class is swapped for `PartitionedEmbedding`, a
subclass of both, before Keras creates any variable. From then on it is a
server table like any other: trained by the servers' copy of the optimizer,
saved in checkpoints and Keras files as a ``ShardedEmbedding`` (so a file
loads under any strategy or none), served by `tfx_dist.serving`. It stays an
instance of ``keras.layers.Embedding`` for the program's own checks.

The servers' rows start from their deterministic per-row values (the
initializer's distribution, not Keras's exact numbers), as for any
``ShardedEmbedding`` on servers.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tfx_dist.layers import keras_arguments
from tfx_dist.layers.sharded_embedding import ShardedEmbedding


class PartitionedEmbedding(ShardedEmbedding, keras.layers.Embedding):
    """A `keras.layers.Embedding` whose table is on the parameter servers (see the module)."""

    @property
    def embeddings(self):
        raise AttributeError(
            f"keras.layers.Embedding '{self.name}' is a table on the parameter servers (the "
            "strategy's variable_partitioner splits it): it has no `embeddings` variable. Read "
            "rows by calling the layer, or all of them with tfx_dist.serving.table_rows(layer).")

    def get_config(self):
        # ShardedEmbedding's arguments: Embedding's own extras (its super) are not among them.
        config = super().get_config()
        for key in set(config) - set(ShardedEmbedding(1, 1).get_config()):
            del config[key]
        return config


# Saved as what it is, a ShardedEmbedding: Keras names a layer's entries in its files after the
# class's name, and records the registered name, whose loading must give ShardedEmbedding itself
# (so the registry's entry is put back).
PartitionedEmbedding.__name__ = PartitionedEmbedding.__qualname__ = "ShardedEmbedding"
keras.saving.register_keras_serializable(package="tfx_dist", name="ShardedEmbedding")(
    PartitionedEmbedding)
keras.saving.get_custom_objects()["tfx_dist>ShardedEmbedding"] = ShardedEmbedding


def shards_wanted(layer, variable_partitioner) -> int:
    """How many shards ``variable_partitioner`` splits ``layer``'s table into (1: none)."""
    if variable_partitioner is None:
        return 1
    shape = tf.TensorShape([layer.input_dim, layer.output_dim])
    return int(variable_partitioner(shape, tf.float32)[0])


def make_server_table(layer) -> None:
    """Turns a not-yet-built ``keras.layers.Embedding`` into a `PartitionedEmbedding` on the
    servers of the strategy in scope, and builds it (its table, no Keras variable)."""
    if getattr(layer, "lora_rank", None) or getattr(layer, "quantization_config", None):
        raise ValueError(
            f"keras.layers.Embedding '{layer.name}': LoRA and quantization need the table in a "
            "Keras variable, and the strategy's variable_partitioner puts it on the parameter "
            "servers. Drop variable_partitioner, or those arguments.")
    layer.__class__ = PartitionedEmbedding
    # What ShardedEmbedding.__init__ sets; Embedding.__init__ set the rest.
    layer.placement = None
    layer.combiner = None
    layer.keras_initializer = layer.embeddings_initializer
    layer.embeddings_initializer = keras_arguments.table_initializer(
        layer.keras_initializer, layer.input_dim, layer.output_dim, layer.name)
    layer.table = None
    ShardedEmbedding.build(layer)
