"""Initial row values are the documented hash of (table, id, column), bit for bit.

The store computes a fixed table's never-updated rows on every lookup (with
AVX2 where the CPU has it); checkpoints of fixed tables rely on those values
never changing. This recomputes them from the formula in
custom_ops/embedding/core/initializer.h with Python integers.
"""

import numpy as np
import pytest

from tfx_dist.embedding import store

M64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & M64
    return x ^ (x >> 31)


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & M64
    return h


def expected_uniform_row(seed, table_id, name, row_id, dim, minval, maxval):
    table_key = splitmix64(splitmix64(seed) ^ splitmix64((table_id ^ fnv1a64(name.encode())) & M64))
    row_key = splitmix64(table_key ^ splitmix64(row_id & M64))
    out = np.empty(dim, np.float32)
    for j in range(dim):
        h = splitmix64(row_key ^ splitmix64((j * 0x100000001B3) & M64))
        u = (float(h >> 11) + 0.5) * (1.0 / 9007199254740992.0)
        out[j] = np.float32(minval + (maxval - minval) * u)
    return out


@pytest.mark.parametrize("dim", [1, 3, 64, 1030])  # 1030: past the SIMD width and the cached columns
def test_uniform_rows_match_the_formula(dim):
    shard = store.TableShard(dim=dim, num_rows=1000, name="clicks", table_id=3, seed=7,
                             initializer=store.Uniform(-0.05, 0.05))
    ids = np.array([0, 1, 17, 999])
    rows = shard.lookup(ids)
    for k, i in enumerate(ids):
        np.testing.assert_array_equal(rows[k], expected_uniform_row(7, 3, "clicks", int(i), dim, -0.05, 0.05))
    assert shard.stored_rows == 0  # computed, not stored


def test_dynamic_rows_start_from_the_same_formula():
    shard = store.TableShard(dim=8, num_rows=None, name="hashed", table_id=1, seed=2,
                             initializer=store.Uniform(-1.0, 3.0))
    ids = np.array([-5, 123456789012])
    rows = shard.lookup(ids)
    for k, i in enumerate(ids):
        np.testing.assert_array_equal(rows[k], expected_uniform_row(2, 1, "hashed", int(i), 8, -1.0, 3.0))
