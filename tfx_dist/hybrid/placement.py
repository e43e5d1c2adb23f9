"""Which `ShardedEmbedding` tables HybridStrategy shards and which it replicates.

Sharding costs two all-to-alls per lookup and a share of the step's two
gradient all-to-alls (all sharded tables' together), whatever the table's size;
replicating costs a copy of the table on every worker and an all-reduce of
its gradient. Small tables are cheaper replicated. The rule: a
table of at least ``TFX_HYBRID_SHARD_MIN_BYTES`` (float32 rows) is sharded;
a layer's ``placement=`` argument overrides it.
"""

from __future__ import annotations

from tfx_dist import settings
from tfx_dist.tables.placement import LAYER_ARGUMENTS, Placement

# The layer's argument values (kept: earlier callers compare with them).
SHARDED, REPLICATED = "sharded", "replicated"


def table_bytes(layer) -> int:
    return int(layer.input_dim) * int(layer.output_dim) * 4


def choose(layer, shard_min_bytes: int | None = None) -> Placement:
    """`Placement.ON_WORKERS` or `Placement.REPLICATED` for ``layer`` (a `ShardedEmbedding`)."""
    placement = getattr(layer, "placement", None)
    if layer.input_dim is None:
        if placement == REPLICATED:
            raise ValueError(f"ShardedEmbedding '{layer.name}': a dynamic table (input_dim=None) "
                             "cannot be replicated: it has no fixed size.")
        return Placement.ON_WORKERS
    if placement is not None:
        return LAYER_ARGUMENTS[placement]
    threshold = settings.get("TFX_HYBRID_SHARD_MIN_BYTES", shard_min_bytes)
    return Placement.ON_WORKERS if table_bytes(layer) >= threshold else Placement.REPLICATED
