"""TableShard.set_optimizer (HybridStrategy sets the model's optimizer on its shard when known)."""

import numpy as np

from tfx_dist.embedding import store


def test_set_optimizer_keeps_rows_and_handle_and_trains_with_the_new_rule():
    shard = store.TableShard(dim=2, num_rows=10, shard_index=0, num_shards=2, optimizer=store.SGD())
    handle = shard.handle
    ids = np.array([0, 4])
    shard.apply_gradients(ids, np.ones((2, 2), np.float32), learning_rate=0.5)
    before = shard.lookup(ids)
    shard.set_optimizer(store.Adagrad(initial_accumulator_value=0.1))
    assert shard.handle == handle and shard.num_slots == 1
    np.testing.assert_array_equal(shard.lookup(ids), before)
    np.testing.assert_allclose(shard.read_record(4)[1], [0.1, 0.1])  # fresh Adagrad slot
    shard.apply_gradients(ids[:1], np.ones((1, 2), np.float32), learning_rate=0.1)
    expected = before[0] - 0.1 * 1.0 / (np.sqrt(0.1 + 1.0) + 1e-7)
    np.testing.assert_allclose(shard.lookup(ids[:1])[0], expected, rtol=1e-5)
