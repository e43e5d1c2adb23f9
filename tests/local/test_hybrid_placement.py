"""HybridStrategy's placement rule: large tables sharded, small ones replicated, per-layer override."""

import pytest

from tfx_dist.hybrid import placement
from tfx_dist.layers import ShardedEmbedding
from tfx_dist.tables import Placement


def test_size_rule_and_override(monkeypatch):
    monkeypatch.setenv("TFX_HYBRID_SHARD_MIN_BYTES", str(1000 * 8 * 4))
    assert placement.choose(ShardedEmbedding(1000, 8)) == Placement.ON_WORKERS  # exactly the threshold
    assert placement.choose(ShardedEmbedding(999, 8)) == Placement.REPLICATED
    assert placement.choose(ShardedEmbedding(999, 8, placement="sharded")) == Placement.ON_WORKERS
    assert placement.choose(ShardedEmbedding(10**7, 8, placement="replicated")) == Placement.REPLICATED
    assert placement.choose(ShardedEmbedding(999, 8), shard_min_bytes=10) == Placement.ON_WORKERS
    assert placement.choose(ShardedEmbedding(None, 8)) == Placement.ON_WORKERS
    with pytest.raises(ValueError, match="dynamic table"):
        placement.choose(ShardedEmbedding(None, 8, placement="replicated"))


def test_bad_placement_is_refused():
    with pytest.raises(ValueError, match="placement"):
        ShardedEmbedding(10, 4, placement="everywhere")
