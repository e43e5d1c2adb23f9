"""Cross-process all-to-all (numpy API): tfx_dist's all-to-all vs all-gather then slice.

N real processes on loopback (shared memory between them, the default). Each
rank holds S bytes of float32 rows, split evenly over the ranks, and in the
same run, interleaved round by round:

  * ``alltoall``: `Communicator.alltoall_numpy(x, splits)`: one pairwise
    exchange, each rank sends and receives (n-1)/n * S;
  * ``allgather+slice``: the obvious alternative without an all-to-all:
    all-gather every rank's tensor and splits, then keep the rows addressed
    to this rank (each rank receives (n-1) * S).

Reports the median time per call on rank 0 and the ratio. Writes a JSON file
and a markdown section (``--out``).

    python benchmarks/alltoall.py --quick
    python benchmarks/alltoall.py --nprocs 2 4 --out benchmarks/results/alltoall.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import common  # noqa: E402

KIB, MIB = common.KIB, common.MIB
SIZES = [64 * KIB, MIB, 16 * MIB]
SYSTEMS = ("alltoall", "allgather+slice")


def _calls(nbytes: int, quick: bool) -> int:
    return int(max(3, min(50 if quick else 200, (32 if quick else 128) * MIB // nbytes)))


def worker(rank: int, addresses: list[str], sizes: list[int], quick: bool) -> None:
    sys.path.insert(0, common.ROOT)
    import numpy as np

    from tfx_dist.comm import Communicator

    n = len(addresses)
    comm = Communicator(rank, n, addresses, timeout_s=120)

    def alltoall(x, splits):
        return comm.alltoall_numpy(x, splits, name="a2a")[0]

    def allgather_slice(x, splits):
        every = comm.allgather_numpy(x, name="ag")
        all_splits = comm.allgather_numpy(np.asarray(splits, np.int64)[None], name="ag_splits")
        starts = np.concatenate([[0], np.cumsum(all_splits.sum(axis=1))])
        parts = []
        for src in range(n):
            off = starts[src] + all_splits[src, :rank].sum()
            parts.append(every[off:off + all_splits[src, rank]])
        return np.concatenate(parts)

    fns = {"alltoall": alltoall, "allgather+slice": allgather_slice}
    result = {}
    for nbytes in sizes:
        rows = max(n, nbytes // 64)  # rows of 16 float32
        rows -= rows % n
        splits = [rows // n] * n
        x = np.full((rows, 16), rank, np.float32)
        want = np.repeat(np.arange(n, dtype=np.float32), rows // n)
        for name, fn in fns.items():  # warm up and check
            out = fn(x, splits)
            assert np.array_equal(out[:, 0], want), name
        times = {name: [] for name in fns}
        calls = _calls(nbytes, quick)
        for _ in range(5 if quick else 9):  # rounds, both systems in each
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn(x, splits)
                times[name].append((time.perf_counter() - t0) / calls)
        result[str(nbytes)] = {name: statistics.median(t) for name, t in times.items()}
    comm.close()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


def run(nprocs: int, sizes: list[int], quick: bool) -> dict:
    addrs = [f"127.0.0.1:{p}" for p in common.free_ports(nprocs)]
    env = dict(os.environ, TFX_JOB_SECRET="bench", PYTHONPATH=common.ROOT)
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", str(r), json.dumps(addrs),
                               json.dumps(sizes)] + (["--quick"] if quick else []),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(nprocs)]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=1800)
        if p.returncode != 0:
            raise RuntimeError(f"worker failed ({p.returncode}):\n{err[-3000:]}")
        outs.append(out)
    for line in outs[0].splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise RuntimeError("rank 0 printed no result")


def _size(nbytes: int) -> str:
    return f"{nbytes // MIB} MiB" if nbytes >= MIB else f"{nbytes // KIB} KiB"


def markdown(result: dict) -> str:
    lines = ["## Cross-process all-to-all (float32, numpy API, loopback)", "",
             "Each rank holds S bytes split evenly over the ranks; median time per call on rank 0. "
             "`allgather+slice` all-gathers every rank's tensor and splits, then keeps its rows "
             "(the way to do it without an all-to-all). Same run, interleaved"
             + (" (`--quick`: 5 rounds, few calls each; rough figures)." if result.get("quick") else "."), "",
             "| ranks | S per rank | alltoall | allgather+slice | alltoall speed-up |", "|---|---|---|---|---|"]
    for nprocs, by_size in result["runs"].items():
        for nbytes, t in by_size.items():
            a, g = t["alltoall"], t["allgather+slice"]
            lines.append(f"| {nprocs} | {_size(int(nbytes))} | {a * 1e3:.3f} ms | {g * 1e3:.3f} ms | "
                         f"{g / a:.2f}x |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), json.loads(sys.argv[3]), json.loads(sys.argv[4]), "--quick" in sys.argv)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nprocs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=os.path.join(common.RESULTS, "alltoall.json"))
    args = parser.parse_args()
    result = {"machine": common.machine_info(), "quick": args.quick,
              "runs": {str(n): run(n, SIZES, args.quick) for n in args.nprocs}}
    md = markdown(result)
    common.write_outputs("alltoall", result, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
