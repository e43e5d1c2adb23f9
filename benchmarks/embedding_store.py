"""Throughput of one embedding table shard in this process (libtfx_embedding via ctypes).

Lookups and gradient applies of BATCH ids x DIM floats on a fixed table
(ROWS rows, uniform ids) and on a dynamic one (the same ids, hashed map;
rows created on the first pass, not timed), per optimizer. Reports the
median of REPEATS timed calls after warm-up, as calls/s, and,
with --threads N, the aggregate rate of N threads doing lookups at once.

With --memory it measures instead what a fixed table's rows cost: one
parameter server's shard (shard 0 of 2) of a MEMORY_ROWS x DIM Adagrad table
trained on MEMORY_TOUCHED of its ids, either consecutive or spread uniformly
over the shard, as the growth of this process's resident memory.

    PYTHONPATH=. python3 benchmarks/embedding_store.py [--threads 2] [--batch 65536] [--memory]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tfx_dist.embedding import store  # noqa: E402

BATCH, DIM, ROWS, REPEATS = 4096, 64, 1_000_000, 30
MEMORY_ROWS, MEMORY_TOUCHED = 10_000_000, 500_000  # 1M touched rows over 2 servers


def _median_s(fn, repeats=REPEATS) -> tuple[float, float]:
    """Median wall time and median CPU time of this thread (the C++ work runs on it):
    on a shared, oversubscribed machine the CPU time is the figure to compare."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - start_cpu)
        wall.append(time.perf_counter() - start)
    return float(np.median(wall)), float(np.median(cpu))


def _threaded_rate(fn, threads: int, calls: int = REPEATS) -> float:
    def work():
        for _ in range(calls):
            fn()

    workers = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return threads * calls / (time.perf_counter() - start)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory(layout: str) -> None:
    """Resident bytes of one server's shard after training MEMORY_TOUCHED rows laid out so."""
    rng = np.random.default_rng(0)
    shard_ids = MEMORY_ROWS // 2  # shard 0 of 2 holds the even ids
    if layout == "consecutive":
        ids = np.arange(MEMORY_TOUCHED, dtype=np.int64) * 2
    else:
        ids = np.sort(rng.choice(shard_ids, MEMORY_TOUCHED, replace=False)).astype(np.int64) * 2
    grads = np.full((65536, DIM), 0.01, np.float32)
    batches = [rng.permutation(ids[s:s + len(grads)]) for s in range(0, len(ids), len(grads))]
    before = _resident_bytes()
    t = store.TableShard(DIM, MEMORY_ROWS, shard_index=0, num_shards=2, optimizer=store.Adagrad())
    for batch in batches:
        t.apply_gradients(batch, grads[:len(batch)], learning_rate=0.01)
    grown = _resident_bytes() - before
    print(f"{layout:12} stored rows {t.stored_rows:>10,}  resident {grown / 1e9:6.3f} GB  "
          f"({grown / MEMORY_TOUCHED:4.0f} bytes per touched row)", flush=True)


def memory_report() -> None:
    """Each layout in a process of its own (freed memory stays resident for the next)."""
    print(f"shard 0 of 2 of a {MEMORY_ROWS:,} x {DIM} Adagrad table, {MEMORY_TOUCHED:,} of its ids "
          f"trained (one record: {2 * DIM * 4} bytes)", flush=True)
    for layout in ("consecutive", "spread"):
        subprocess.run([sys.executable, __file__, "--memory-layout", layout], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--batch", type=int, default=BATCH, help="ids per call")
    parser.add_argument("--memory", action="store_true", help="what a fixed table's rows cost")
    parser.add_argument("--memory-layout", choices=("consecutive", "spread"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_layout:
        memory(args.memory_layout)
        return
    if args.memory:
        memory_report()
        return
    rng = np.random.default_rng(0)
    batches = [rng.integers(0, ROWS, args.batch) for _ in range(8)]
    grads = rng.normal(0, 0.01, (args.batch, DIM)).astype(np.float32)
    print(f"{args.batch} ids x {DIM} floats per call, median of {REPEATS}; calls/s by wall time "
          f"and (cpu) by this thread's CPU time")
    print(f"{'table':8} {'optimizer':9} {'lookup/s':>9} {'(cpu)':>7} {'apply/s':>8} {'(cpu)':>7}")
    for kind in ("fixed", "dynamic"):
        for opt in (store.SGD(), store.Adagrad(), store.Adam()):
            t = store.TableShard(DIM, ROWS if kind == "fixed" else None, optimizer=opt)
            for b in batches:  # materialize every block / create every row first
                t.apply_gradients(b, grads, learning_rate=0.01)
            i = iter(range(10**9))
            lookup_s, lookup_cpu = _median_s(lambda: t.lookup(batches[next(i) % 8]))
            apply_s, apply_cpu = _median_s(lambda: t.apply_gradients(batches[next(i) % 8], grads, 0.01, 2))
            print(f"{kind:8} {type(opt).__name__:9} {1 / lookup_s:9.0f} {1 / lookup_cpu:7.0f} "
                  f"{1 / apply_s:8.0f} {1 / apply_cpu:7.0f}")
            if args.threads:
                rate = _threaded_rate(lambda: t.lookup(batches[next(i) % 8]), args.threads)
                print(f"{'':18} {args.threads} threads: {rate:.0f} lookups/s")
            t.close()


if __name__ == "__main__":
    main()
