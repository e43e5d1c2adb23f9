"""Bad input to a TableShard: a clear error, and the table unchanged."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import tfx_dist
from tfx_dist.embedding import _native, store

DIM = 4


@pytest.fixture
def shard():
    """Shard 1 of 2 of a 10-row Adam table, trained one step."""
    t = store.TableShard(DIM, 10, shard_index=1, num_shards=2, name="clicks", optimizer=store.Adam())
    t.apply_gradients([1, 3], np.ones((2, DIM)), learning_rate=0.1, step=1)
    yield t
    t.close()


def _snapshot(t):
    return np.stack([t.read_record(i) for i in range(1, 10, 2)])


@pytest.mark.parametrize("ids, error, needle", [
    ([1, 11], store.OutOfRangeError, "id 11 (position 1) is out of range [0, 10)"),
    ([-1], store.OutOfRangeError, "id -1 (position 0) is out of range"),
    ([3, 2], store.InvalidArgumentError, "id 2 (position 1) belongs to shard 0"),
])
def test_bad_ids(shard, ids, error, needle):
    before = _snapshot(shard)
    with pytest.raises(error) as e:
        shard.lookup(ids)
    assert needle in str(e.value) and "table 'clicks'" in str(e.value)
    with pytest.raises(error, match=r"table 'clicks'"):
        shard.apply_gradients(ids, np.ones((len(ids), DIM)), learning_rate=0.1, step=2)
    np.testing.assert_array_equal(_snapshot(shard), before)


def test_bad_gradients_and_steps(shard):
    before = _snapshot(shard)
    with pytest.raises(ValueError, match=r"shape \(2, 4\) .* Received: shape=\(2, 3\)"):
        shard.apply_gradients([1, 3], np.ones((2, 3)), learning_rate=0.1)
    with pytest.raises(ValueError, match="1-D array of ids"):
        shard.lookup([[1, 3]])
    with pytest.raises(TypeError, match="integer ids"):
        shard.lookup([1.0])
    nan = np.ones((2, DIM), np.float32)
    nan[1, 2] = np.nan
    with pytest.raises(store.InvalidArgumentError, match=r"id 3 \(position 1, column 2\) is nan"):
        shard.apply_gradients([1, 3], nan, learning_rate=0.1, step=2)
    with pytest.raises(store.InvalidArgumentError, match="learning rate must be finite"):
        shard.apply_gradients([1], np.ones((1, DIM)), learning_rate=float("inf"), step=2)
    with pytest.raises(store.InvalidArgumentError, match="step >= 1"):
        shard.apply_gradients([1], np.ones((1, DIM)), learning_rate=0.1, step=0)
    np.testing.assert_array_equal(_snapshot(shard), before)
    # Empty input is a no-op (a shard may receive no ids in a step).
    assert shard.lookup(np.zeros(0, np.int64)).shape == (0, DIM)
    shard.apply_gradients([], np.zeros((0, DIM)), learning_rate=0.1, step=2)
    np.testing.assert_array_equal(_snapshot(shard), before)


def test_bad_configs():
    with pytest.raises(store.InvalidArgumentError, match="dim must be > 0"):
        store.TableShard(0, 10)
    with pytest.raises(store.InvalidArgumentError, match="shard_index < num_shards"):
        store.TableShard(4, 10, shard_index=2, num_shards=2)
    with pytest.raises(store.InvalidArgumentError, match="beta_1"):
        store.TableShard(4, 10, optimizer=store.Adam(beta_1=1.5))
    with pytest.raises(store.InvalidArgumentError, match="uniform initializer"):
        store.TableShard(4, 10, initializer=store.Uniform(1.0, -1.0))
    with pytest.raises(ValueError, match="Expected an initializer"):
        store.TableShard(4, 10, initializer="glorot")
    with pytest.raises(ValueError, match="num_rows > 0"):
        store.TableShard(4, 0)


def test_dynamic_table_and_routing():
    ids = np.array([-5, 0, 2**62, -(2**63), 17, 17], np.int64)
    owner = store.shard_of(ids, 3, dynamic=True)
    shards = [store.TableShard(DIM, None, shard_index=s, num_shards=3, name="hashed") for s in range(3)]
    single = store.TableShard(DIM, None, name="hashed")
    got = np.empty((len(ids), DIM), np.float32)
    for s, t in enumerate(shards):
        got[owner == s] = t.lookup(ids[owner == s])
    np.testing.assert_array_equal(got, single.lookup(ids))
    assert sum(t.num_rows for t in shards) == 5 and single.num_rows == 5
    with pytest.raises(store.NotFoundError, match="no row with id 99"):
        single.read_record(99)
    with pytest.raises(store.OutOfRangeError, match="negative"):
        store.shard_of([-1], 2, dynamic=False)


def test_checkpoint_resharding_and_corruption(tmp_path):
    def make(s, n):
        return store.TableShard(DIM, 100, shard_index=s, num_shards=n, name="ck",
                                optimizer=store.Ftrl(l1_regularization_strength=0.01))

    three = [make(s, 3) for s in range(3)]
    ids = np.arange(100)
    for step in (1, 2):
        for s, t in enumerate(three):
            mine = ids[ids % 3 == s]
            t.apply_gradients(mine, np.full((len(mine), DIM), 0.1 * step), learning_rate=0.1, step=step)
    paths = [tmp_path / f"ck-{s}" for s in range(3)]
    for t, p in zip(three, paths):
        t.save(p)
    expected = np.stack([three[i % 3].read_record(i) for i in ids])
    for n in (1, 2):
        shards = [make(s, n) for s in range(n)]
        for t in shards:
            t.restore(paths)
        np.testing.assert_array_equal(np.stack([shards[i % n].read_record(i) for i in ids]), expected)
    target = make(0, 1)
    before = target.lookup(ids)
    data = paths[1].read_bytes()
    bad = tmp_path / "bad"
    bad.write_bytes(data[:-3])
    with pytest.raises(store.DataLossError, match=str(bad)):
        target.restore([paths[0], bad, paths[2]])
    np.testing.assert_array_equal(target.lookup(ids), before)


def test_concurrent_lookups_and_updates():
    """No torn rows seen from Python threads (ctypes releases the GIL)."""
    t = store.TableShard(16, 64, initializer="zeros", optimizer=store.SGD())
    ids, stop, torn = np.arange(64), threading.Event(), []

    def read():
        while not stop.is_set():
            rows = t.lookup(ids)
            if not (rows == rows[:, :1]).all():
                torn.append(rows)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for r in readers:
        r.start()
    for step in range(200):
        t.apply_gradients(ids, -np.ones((64, 16)), learning_rate=1.0, step=step + 1)
    stop.set()
    for r in readers:
        r.join()
    assert not torn
    np.testing.assert_array_equal(t.lookup(ids), np.full((64, 16), 200.0))


def test_abi_mismatch_raises(monkeypatch):
    so = _native.lib()
    monkeypatch.setattr(_native, "ABI_VERSION", _native.ABI_VERSION + 1)
    with pytest.raises(tfx_dist.OpLibraryError, match="struct sizes"):
        _native.check_abi(so, "libtfx_embedding.so")
