"""A plain `keras.layers.Embedding` under parameter servers: sharded, or not silently replicated.

Programs written for TensorFlow's ``ParameterServerStrategy(variable_partitioner=...)``
expect large embedding tables to be sharded over the servers with no change to
the model. When the strategy's ``variable_partitioner`` splits a
``keras.layers.Embedding``, the layer becomes a table on the servers
(`partitioned_embeddings`). Otherwise it stays a Keras variable: a full copy on
every worker, its gradient all-reduced; if it is at least
``TFX_HYBRID_SHARD_MIN_BYTES`` (the size from which `tfx_dist.HybridStrategy`
shards a table), a warning, once per layer, names the layer, its size, and the
two ways to put it on the servers.

`install` wraps ``keras.layers.Embedding.build`` (a public method) once; the
strategy in scope decides, through its extended's ``plain_embedding_building``,
before Keras creates the table's variable.
"""

from __future__ import annotations

import functools
import threading
import warnings

import keras
import tensorflow as tf

from tfx_dist import settings

_lock = threading.Lock()
_installed = False


class ReplicatedEmbeddingWarning(UserWarning):
    """A large keras.layers.Embedding is replicated on every worker, not on the servers."""


def install() -> None:
    """Lets the strategy in scope see each `keras.layers.Embedding` it builds (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        build = keras.layers.Embedding.build

        @functools.wraps(build)
        def build_and_tell_strategy(self, *args, **kwargs):
            building = getattr(tf.distribute.get_strategy().extended, "plain_embedding_building", None)
            if building is not None and building(self):
                return  # the strategy built it (a table of its own)
            build(self, *args, **kwargs)

        keras.layers.Embedding.build = build_and_tell_strategy
        _installed = True


def warn_if_large(layer) -> None:
    """Warns (once per layer) if ``layer``, replicated, is at least ``TFX_HYBRID_SHARD_MIN_BYTES``."""
    size = layer.input_dim * layer.output_dim * 4
    threshold = settings.get("TFX_HYBRID_SHARD_MIN_BYTES")
    if size < threshold or getattr(layer, "_tfx_warned_replicated", False):
        return
    layer._tfx_warned_replicated = True  # pylint: disable=protected-access
    warnings.warn(
        f"tfx_dist: keras.layers.Embedding '{layer.name}' ({layer.input_dim} x {layer.output_dim}, "
        f"{size:,} bytes, at least TFX_HYBRID_SHARD_MIN_BYTES={threshold:,}) is replicated on every "
        "worker with its gradient all-reduced, not sharded over the parameter servers. To shard it, "
        "give the strategy a partitioner, as for TensorFlow's: tfx_dist.ParameterServerStrategy("
        "variable_partitioner=tf.distribute.experimental.partitioners.MinSizePartitioner()), or use "
        f"tfx_dist.layers.ShardedEmbedding({layer.input_dim}, {layer.output_dim}, ...) with the same "
        "arguments.", ReplicatedEmbeddingWarning, stacklevel=3)
