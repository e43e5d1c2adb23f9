"""Keras layers of tfx_dist."""

from tfx_dist.layers.sharded_embedding import ShardedEmbedding

__all__ = ["ShardedEmbedding"]
