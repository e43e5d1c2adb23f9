"""One rank of a multi-process test of tfx_dist.comm (run by test_comm.py).

Usage: python comm_worker.py SCENARIO RANK ADDRESSES_JSON [ARG]

Imports tfx_dist.comm, which needs no TensorFlow: these scenarios test the
runtime through its numpy/ctypes path, so each rank starts in well under a
second. Prints "RESULT <json>" on success; an expected
failure prints "ERROR <type>: <message>" and exits with 3.
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tfx_dist.comm import Communicator, _native  # noqa: E402

DTYPES = [np.float16, _native._bfloat16(), np.float32, np.float64, np.int32, np.int64]
SIZES = [0, 1, 3, 17, 1000, 65537]


def data(rank, case, n, dtype):
    rng = np.random.default_rng(1000 * case + rank)
    if np.dtype(dtype).kind == "f" or dtype is DTYPES[1]:
        return rng.integers(-8, 8, n).astype(dtype)  # small integers: exact in every float type
    return rng.integers(-1000, 1000, n).astype(dtype)


def expected(values, reduction, dtype):
    stack = np.stack([v.astype(np.float64) for v in values])
    out = {"sum": stack.sum(0), "min": stack.min(0), "max": stack.max(0)}.get(reduction)
    if reduction == "mean":
        if np.dtype(dtype).kind == "i":
            return (stack.sum(0).astype(np.int64) // 1).astype(np.int64), True
        out = stack.sum(0) / len(values)
    return out, False


def check_collectives(comm, rank, size):
    checked = 0
    case = 0
    for dtype in DTYPES:
        for reduction in ("sum", "mean", "min", "max"):
            for n in SIZES:
                case += 1
                mine = data(rank, case, n, dtype)
                out, = comm.allreduce_numpy([mine], reduction=reduction)
                allv = [data(r, case, n, dtype) for r in range(size)]
                stack = np.stack([v.astype(np.float64) for v in allv])
                if reduction == "sum":
                    want = stack.sum(0)
                elif reduction == "min":
                    want = stack.min(0)
                elif reduction == "max":
                    want = stack.max(0)
                elif np.dtype(dtype).kind == "i":  # integer mean rounds down, as TensorFlow's //
                    want = np.floor(stack.sum(0) / size)
                else:
                    want = stack.sum(0) / size
                assert out.dtype == np.dtype(dtype) and out.shape == mine.shape
                tol = 1e-2 if np.dtype(dtype).itemsize == 2 else 1e-6
                np.testing.assert_allclose(out.astype(np.float64), want, rtol=tol, atol=tol,
                                           err_msg=f"{np.dtype(dtype)} {reduction} n={n}")
                checked += 1
    # Several tensors of mixed dtypes and shapes in one call: fused buckets.
    case += 1
    shapes = [(3, 5), (0,), (7,), (2, 2, 2), (1000,)]
    arrays = [data(rank, case + i, int(np.prod(s)), np.float32).reshape(s) for i, s in enumerate(shapes)]
    arrays.append(data(rank, case + 99, 11, np.int64))
    outs = comm.allreduce_numpy(arrays)
    for i, (a, o) in enumerate(zip(arrays, outs)):
        seed_case = case + (99 if i == len(arrays) - 1 else i)
        want = sum(data(r, seed_case, a.size, a.dtype).astype(np.float64) for r in range(size))
        np.testing.assert_allclose(o.ravel(), np.asarray(want).ravel(), err_msg=f"fused tensor {i}")
        checked += 1
    # Large tensors (reduced where they lie) between small ones (packed), odd
    # sizes so that segment boundaries cut through them; out of place and in place.
    for in_place in (False, True):
        case += 1
        sizes = [5, 70001, 3, 1, 16384, 200003, 7]
        arrays = [data(rank, case + i, s, np.float32) for i, s in enumerate(sizes)]
        kept = [a.copy() for a in arrays]
        outs = comm.allreduce_numpy(arrays, out=arrays if in_place else None)
        for i, (a, o) in enumerate(zip(kept, outs)):
            want = sum(data(r, case + i, a.size, np.float32).astype(np.float64) for r in range(size))
            np.testing.assert_allclose(o, want, err_msg=f"mixed tensor {i}, in place {in_place}")
            if not in_place:
                np.testing.assert_array_equal(arrays[i], a, err_msg="an input was written")
            checked += 1
    # Compression on the wire (float32 only): exact for small integers.
    for comp in ("float16", "bfloat16"):
        case += 1
        mine = data(rank, case, 4099, np.float32)
        out, = comm.allreduce_numpy([mine], compression=comp)
        want = sum(data(r, case, 4099, np.float32).astype(np.float64) for r in range(size))
        np.testing.assert_allclose(out, want, err_msg=comp)
        checked += 1
    # All-gather with a different first dimension on every rank (rank 0: none).
    for dtype in (np.float32, np.int64, np.uint8, np.float16):
        case += 1
        mine = (np.arange(rank * 3 * 4) % 97).astype(dtype).reshape(rank * 3, 4) + rank
        out = comm.allgather_numpy(mine)
        want = np.concatenate([(np.arange(r * 3 * 4) % 97).astype(dtype).reshape(r * 3, 4) + r
                               for r in range(size)])
        np.testing.assert_array_equal(out, want)
        checked += 1
    # Broadcast from every root, two tensors at once.
    for root in range(size):
        mine = [np.full((5, 3), rank, np.float64), np.arange(10, dtype=np.int32) * (rank + 1)]
        outs = comm.broadcast_numpy(mine, root=root)
        np.testing.assert_array_equal(outs[0], np.full((5, 3), root, np.float64))
        np.testing.assert_array_equal(outs[1], np.arange(10, dtype=np.int32) * (root + 1))
        checked += 1
    # A large all-reduce (several chunks and slots, odd element count).
    n = (3 << 20) + 5
    big = np.full(n, rank + 1, np.float32)
    big[-1] = rank
    out, = comm.allreduce_numpy([big])
    assert out[0] == size * (size + 1) / 2 and out[-1] == size * (size - 1) / 2
    assert np.all(out[:-1] == out[0])
    checked += 1
    return checked


def timed_error(call):
    """(the error ``call()`` raised as "Type: message", or None; seconds until it returned or raised)."""
    t0 = time.monotonic()
    try:
        call()
        error = None
    except Exception as e:  # noqa: BLE001 -- reported to the test
        error = f"{type(e).__name__}: {e}"
    return error, time.monotonic() - t0


def main():
    scenario, rank, addresses = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    size = len(addresses)
    timeout = float(os.environ.get("TFX_TIMEOUT_S", "20"))
    secret = os.environ.get("TFX_JOB_SECRET")
    if scenario == "wrong_secret" and rank == int(arg):
        secret = "not-the-job-secret"
    try:
        comm = Communicator(rank, size, addresses, secret=secret, timeout_s=timeout)
        result = {"transports": [comm.transport(p) for p in range(size)]}
        if scenario == "collectives":
            result["checked"] = check_collectives(comm, rank, size)
        elif scenario == "collectives_small":
            out, = comm.allreduce_numpy([np.full(1001, rank + 1, np.float32)])
            assert np.all(out == size * (size + 1) / 2)
        elif scenario == "mismatch":
            n = 5 if rank == size - 1 else 4
            result["mismatch_error"], result["mismatch_s"] = timed_error(
                lambda: comm.allreduce_numpy([np.ones(n, np.float32)], name="grads"))
            out, = comm.allreduce_numpy([np.ones(4, np.float32)], name="after")
            result["after"] = out.tolist()
        elif scenario in ("die", "hang", "die_mid_ring"):
            victim = int(arg)
            comm.allreduce_numpy([np.ones(8, np.float32)])
            if rank == victim:
                if scenario == "die":
                    os._exit(0)
                if scenario == "hang":
                    time.sleep(timeout * 3)
                    os._exit(0)
                import threading
                threading.Timer(0.5, lambda: os._exit(0)).start()
            result["error"], result["error_after_s"] = timed_error(
                lambda: [comm.allreduce_numpy([np.ones(1 << 20, np.float32)]) for _ in range(10000)])
        elif scenario == "late_peer":
            # Each rank in turn arrives long after the other's drive budget:
            # the request is left to the runtime thread, and still completes.
            before = comm.stats()
            for i in range(6):
                if i % size == rank:
                    time.sleep(0.05)
                out, = comm.allreduce_numpy([np.full(1000 + i, rank + i, np.float32)], name="late")
                assert np.all(out == sum(r + i for r in range(size))), out[:4]
            after = comm.stats()
            result["stats"] = {k: after[k] - before[k] for k in after}
            result["done"] = True
        elif scenario == "threads":
            # Several threads call at once, each rank in its own order: one
            # drives, the others' requests are run by it or the runtime thread.
            import threading

            names = [f"t{k}" for k in range(6)]
            order = names if rank % 2 == 0 else names[::-1]
            errors, results = [], {}

            def call(name, k):
                try:
                    for it in range(20):
                        out, = comm.allreduce_numpy([np.full(64 * (k + 1), rank + it, np.float64)],
                                                    name=f"{name}.{it}")
                        assert np.all(out == sum(r + it for r in range(size)))
                    results[name] = True
                except Exception as e:  # noqa: BLE001
                    errors.append(f"{name}: {e}")

            threads = [threading.Thread(target=call, args=(n, names.index(n))) for n in order]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            result["errors"] = errors
            result["ok"] = sorted(results)
        elif scenario == "idle_then_dead":
            # The victim dies while every rank is idle; the survivors' next
            # collective fails naming it (an idle rank reads its control
            # connection only then).
            victim = int(arg)
            comm.allreduce_numpy([np.ones(8, np.float32)])
            if rank == victim:
                os._exit(0)
            time.sleep(0.5)
            result["error"], result["error_after_s"] = timed_error(
                lambda: comm.allreduce_numpy([np.ones(8, np.float32)]))
        elif scenario == "coordinator_never_submits":
            # Rank 0 never makes "orphan": the others get the coordinator's
            # timeout naming rank 0, and everyone goes on.
            if rank != 0:
                result["error"], result["error_after_s"] = timed_error(
                    lambda: comm.allreduce_numpy([np.ones(4, np.float32)], name="orphan"))
            else:
                time.sleep(timeout + 0.5)
            out, = comm.allreduce_numpy([np.ones(4, np.float32)], name="after")
            result["after"] = out.tolist()
        elif scenario == "wrong_secret":
            result["error"] = None
        comm.close()
    except Exception as e:  # noqa: BLE001
        print(f"ERROR {type(e).__name__}: {e}", flush=True)
        sys.exit(3)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
