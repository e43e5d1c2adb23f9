"""Single-process checks of the runtime: wire compression and fusion buckets.

With one rank an all-reduce with compression is exactly a float32 -> half ->
float32 round trip through the runtime's conversion kernels, which must
round like numpy/ml_dtypes (nearest even, subnormals, overflow, inf, nan).
"""

import os

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def comm():
    from tfx_dist.comm import Communicator

    c = Communicator(0, 1, ["127.0.0.1:1"])
    yield c
    c.close()


def _values():
    rng = np.random.default_rng(0)
    special = np.array([0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, 1e6, -1e6, 6.1e-5, 6.0e-8,
                        3.0e-8, 2.9e-8, 1e-10, np.inf, -np.inf, 1.0009765625, 1.00048828125,
                        1.00146484375, 3.4e38], np.float32)
    bits = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits = bits[np.isfinite(bits)]
    return np.concatenate([special, rng.normal(0, 1000, 5000).astype(np.float32),
                           rng.normal(0, 1e-5, 5000).astype(np.float32), bits])


def test_float16_round_trip_matches_numpy(comm):
    x = _values()
    out, = comm.allreduce_numpy([x], compression="float16")
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    nan, = comm.allreduce_numpy([np.array([np.nan], np.float32)], compression="float16")
    assert np.isnan(nan[0])


def test_bfloat16_round_trip_matches_ml_dtypes(comm):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = _values()
    out, = comm.allreduce_numpy([x], compression="bfloat16")
    np.testing.assert_array_equal(out, x.astype(ml_dtypes.bfloat16).astype(np.float32))


def test_compression_leaves_other_dtypes_alone(comm):
    x = np.array([1.0000001, 3.14159265358979], np.float64)
    out, = comm.allreduce_numpy([x], compression="float16")
    np.testing.assert_array_equal(out, x)


def test_mean_min_max_with_one_rank_are_the_identity(comm):
    x = np.arange(-5, 6, dtype=np.int32)
    for red in ("sum", "mean", "min", "max"):
        out, = comm.allreduce_numpy([x], reduction=red)
        np.testing.assert_array_equal(out, x)


def test_fusion_packs_tensors_into_buckets_up_to_the_threshold():
    from tfx_dist.comm import Communicator

    arrays = [np.full(1000, i, np.float32) for i in range(10)]  # 4000 bytes each
    with Communicator(0, 1, ["127.0.0.1:1"], fusion_bucket_bytes=10000) as small:
        outs = small.allreduce_numpy(arrays)
        assert [o[0] for o in outs] == list(range(10))
        # Two tensors fit in 10000 bytes, three do not: 5 buckets.
        assert small.stats()["allreduce_buckets"] == 5
        assert small.stats()["allreduce_tensors"] == 10
    with Communicator(0, 1, ["127.0.0.1:1"]) as big:
        big.allreduce_numpy(arrays + [np.ones(3, np.int32)])
        # float32 tensors in one bucket; the int32 one cannot share it.
        assert big.stats()["allreduce_buckets"] == 2
        assert big.stats()["allreduce_bytes"] == 40012


def test_cycle_time_holds_requests_back_and_fuses_what_arrived_meanwhile():
    import threading
    import time

    from tfx_dist.comm import Communicator

    with Communicator(0, 1, ["127.0.0.1:1"], cycle_time_ms=400) as comm:
        comm.allreduce_numpy([np.ones(4, np.float32)], name="first")  # opens a cycle
        t0 = time.monotonic()
        results = {}

        def call(i):
            results[i] = comm.allreduce_numpy([np.full(4, i, np.float32)], name=f"t{i}")

        threads = [threading.Thread(target=call, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert time.monotonic() - t0 > 0.2  # waited for the next cycle
        assert [results[i][0][0] for i in range(2)] == [0.0, 1.0]
        # "first" alone, then both threads' requests in one bucket.
        assert comm.stats()["allreduce_buckets"] == 2


def test_the_runtime_thread_is_named_for_top_and_profilers(comm):
    names = set()
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.add(f.read().strip())
        except FileNotFoundError:  # a thread (not ours) that ended since the listing
            pass
    assert "tfx_comm_r0" in names


def test_allreduce_out_may_not_overlap_another_tensor(comm):
    a = np.ones(100, np.float32)
    b = np.ones(100, np.float32)
    with pytest.raises(ValueError, match=r"out\[1\]` overlaps the input or output of tensor 0"):
        comm.allreduce_numpy([a, b], out=[np.empty(100, np.float32), a])
    # In place, each on its own input: allowed.
    out = comm.allreduce_numpy([a, b], out=[a, b])
    assert out[0] is a and np.all(a == 1)


def test_the_library_matches_the_python_bindings_and_settings():
    # _native.lib() checks every code and struct size against the library
    # (tfx_comm_abi_value); the runtime's own defaults (for C callers) are
    # the settings' defaults, which Python passes explicitly.
    from tfx_dist import settings
    from tfx_dist.comm import _native

    so = _native.lib()
    d = so.tfx_comm_default_options()
    assert d.timeout_s == settings.SETTINGS["TFX_TIMEOUT_S"].default
    assert d.bucket_bytes == settings.SETTINGS["TFX_COMM_FUSION_BYTES"].default
    assert d.cycle_time_ms == settings.SETTINGS["TFX_CYCLE_TIME_MS"].default
    assert bool(d.use_shm) == settings.SETTINGS["TFX_SHM"].default
    assert d.chunk_bytes == settings.SETTINGS["TFX_CHUNK_BYTES"].default
    assert d.hierarchical == _native.HIERARCHICAL[settings.SETTINGS["TFX_HIERARCHICAL"].default]
    assert d.hierarchical_min_stripe_bytes == settings.SETTINGS[
        "TFX_HIERARCHICAL_MIN_STRIPE_BYTES"].default
    assert so.tfx_comm_abi_value(b"TFX_OP_ALLGATHER") == _native.OP_ALLGATHER


def test_a_library_with_other_codes_is_refused(monkeypatch):
    import tfx_dist
    from tfx_dist.comm import _native

    monkeypatch.setitem(_native.DTYPES, "int64", 99)
    with pytest.raises(tfx_dist.OpLibraryError, match="TFX_DTYPE_INT64: library 6, Python 99"):
        _native.check_abi(_native.lib())
