"""A plain `keras.layers.Embedding` under parameter servers is not silent.

Programs written for TensorFlow's ``ParameterServerStrategy(variable_partitioner=...)``
expect large embedding tables to be sharded over the servers with no change to
the model. tfx_dist keeps a ``keras.layers.Embedding`` a Keras variable (Keras's
layer reads its whole table each step, so it cannot live on servers): a full
copy on every worker, its gradient all-reduced. So when one is built under a
strategy with parameter servers, and either the strategy's
``variable_partitioner`` would split it or it is at least
``TFX_HYBRID_SHARD_MIN_BYTES`` (the size from which `tfx_dist.HybridStrategy`
shards a table), a warning names the layer, its size, and the one-line change
that puts it on the servers: `tfx_dist.layers.ShardedEmbedding` with the same
arguments.

`install` wraps ``keras.layers.Embedding.build`` (a public method) once; the
strategy in scope decides, through its extended's ``plain_embedding_built``.
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
            build(self, *args, **kwargs)
            seen = getattr(tf.distribute.get_strategy().extended, "plain_embedding_built", None)
            if seen is not None:
                seen(self)

        keras.layers.Embedding.build = build_and_tell_strategy
        _installed = True


def warn_if_large(layer, variable_partitioner=None) -> None:
    """Warns (once per layer) if ``layer`` would be sharded by TensorFlow's strategy, or is large."""
    shape = tf.TensorShape([layer.input_dim, layer.output_dim])
    size = layer.input_dim * layer.output_dim * 4
    if variable_partitioner is not None:
        shards = int(variable_partitioner(shape, tf.float32)[0])
        why = f"variable_partitioner splits it into {shards} shards" if shards > 1 else None
    else:
        threshold = settings.get("TFX_HYBRID_SHARD_MIN_BYTES")
        why = f"it is at least TFX_HYBRID_SHARD_MIN_BYTES ({threshold})" if size >= threshold else None
    if why is None or getattr(layer, "_tfx_warned_replicated", False):
        return
    layer._tfx_warned_replicated = True  # pylint: disable=protected-access
    warnings.warn(
        f"tfx_dist: keras.layers.Embedding '{layer.name}' ({layer.input_dim} x {layer.output_dim}, "
        f"{size} bytes) is replicated on every worker with its gradient all-reduced, not sharded "
        f"over the parameter servers, although {why}. To shard it, use "
        f"tfx_dist.layers.ShardedEmbedding({layer.input_dim}, {layer.output_dim}, ...) with the "
        "same arguments.", ReplicatedEmbeddingWarning, stacklevel=3)
