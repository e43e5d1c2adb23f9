"""The plain C loops the local all-reduce benchmark compares the op with
(benchmarks/native_loops.py): they must compute what they claim, or their
timings mean nothing."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "benchmarks"))
from native_loops import NativeLoops  # noqa: E402


@pytest.fixture(scope="module")
def loops():
    built = NativeLoops.load()
    if built is None:
        pytest.skip("no C compiler")
    return built


@pytest.mark.parametrize("k", [1, 2, 4, 5])
@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("n,skew", [(1, 0), (37, 1), (100_003, 3), (1 << 20, 0)])
def test_sum_stream_matches_numpy(loops, k, threads, n, skew):
    rng = np.random.default_rng(n + k)
    arrays = [rng.standard_normal(n + skew).astype(np.float32)[skew:] for _ in range(k)]
    out = np.zeros(n + 5, np.float32)[skew:skew + n]  # unaligned when skew > 0
    loops.sum_stream(arrays, out, threads)
    expected = arrays[0].copy()
    for a in arrays[1:]:
        expected += a  # the same order of additions as the loop
    np.testing.assert_array_equal(out, expected)


def test_read_once_and_bad_arguments(loops):
    arrays = [np.ones(1000, np.float32) for _ in range(3)]
    loops.read_once(arrays, 2)
    with pytest.raises(ValueError, match="out of range"):
        loops.read_once([np.ones(8, np.float32)] * 17, 1)
    with pytest.raises(ValueError, match="one size"):
        loops.read_once([np.ones(8, np.float32), np.ones(9, np.float32)], 1)
    with pytest.raises(ValueError, match="float32"):
        loops.sum_stream([np.ones(8)], np.ones(8, np.float32), 1)
