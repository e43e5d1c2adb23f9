"""Hierarchical vs flat-ring all-reduce on simulated hosts over a shaped link.

Builds simulated hosts (tests/multihost/hosts.py: a network, IPC and mount
namespace per host, so processes of one host share /dev/shm and the others
reach them only over the link), shapes host 0's link to a rate (tbf, both
directions), and starts ``--layout`` workers per host. Every worker builds two
communicators over the same cluster, one with TFX_HIERARCHICAL=off (the flat
ring, in topology order: it crosses the link once each way) and one with
TFX_HIERARCHICAL=on, a third with auto (the default: hierarchical above a
size, TFX_HIERARCHICAL_MIN_STRIPE_BYTES), and times float32 sum all-reduces (numpy, in place)
through all three, alternating call by call, so both see the same machine. Rank
0's median per size is reported, with algbw = bytes / time and the ratio.

Needs root and network namespaces (as tests/multihost); otherwise it writes
a section saying why it did not run.

    sudo python benchmarks/hierarchical_allreduce.py --out results/hierarchical_allreduce.json
    python benchmarks/hierarchical_allreduce.py --layout 4 4 --rate 1gbit
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KIB, MIB = 1 << 10, 1 << 20
SIZES = [4 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB]
QUICK_SIZES = [4 * KIB, MIB, 64 * MIB]
BASE_PORT = 24567


def _repeats(nbytes: int, quick: bool) -> int:
    budget = (128 if quick else 512) * MIB  # bytes per size and algorithm, roughly
    return int(max(3, min(30 if quick else 100, budget // nbytes)))


# --------------------------------------------------------------------------- worker

def worker(args) -> None:
    import numpy as np

    from tfx_dist.comm import Communicator

    addresses = json.loads(os.environ["BENCH_ADDRESSES"])
    rank = int(os.environ["BENCH_RANK"])
    def shifted(by):
        return [f"{a.rsplit(':', 1)[0]}:{int(a.rsplit(':', 1)[1]) + by}" for a in addresses]
    comms = {"ring": Communicator(rank, len(addresses), addresses, hierarchical="off"),
             "hierarchical": Communicator(rank, len(addresses), shifted(100), hierarchical="on"),
             "auto": Communicator(rank, len(addresses), shifted(200), hierarchical="auto")}
    result = {"algorithms": {k: c.allreduce_algorithm() for k, c in comms.items()}, "sizes": {}}
    for nbytes in args.sizes:
        x = np.ones(nbytes // 4, dtype=np.float32)
        times = {k: [] for k in comms}
        reps = _repeats(nbytes, args.quick)
        for rep in range(reps + 1):  # the first round warms up
            # Rotate which algorithm goes first: the first call of a round pays
            # the others' wake-up (10-15% at small sizes when always the same one).
            order = list(comms.items())
            order = order[rep % len(order):] + order[:rep % len(order)]
            for k, c in order:
                t0 = time.perf_counter()
                c.allreduce_numpy([x], name=f"b{nbytes}/{rep}", out=[x])
                if rep:
                    times[k].append(time.perf_counter() - t0)
                x[:] = 1.0
        result["sizes"][str(nbytes)] = {k: statistics.median(v) for k, v in times.items()}
    for c in comms.values():
        c.close()
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)


# --------------------------------------------------------------------------- driver

def _link_bounds(result: dict, nbytes: int) -> str:
    """What host 0's link alone allows at nbytes: each ring edge leaving a host carries
    2(m-1)/m of what that ring reduces (m ranks in it), per direction."""
    sys.path.insert(0, os.path.join(ROOT, "tests", "multihost"))
    from hosts import _bits  # noqa: E402

    hosts, n = len(result["layout"]), sum(result["layout"])
    per_s = _bits(result["rate"]) / 8
    flat = 2 * (n - 1) / n * nbytes / per_s
    hier = 2 * (hosts - 1) / hosts * nbytes / per_s
    return (f"The link alone bounds {nbytes // MIB} MiB at {hier:.2f} s hierarchical, "
            f"{flat:.2f} s flat (bound ratio {flat / hier:.2f}x).")


def markdown(result: dict) -> str:
    layout = " + ".join(str(n) for n in result["layout"])
    lines = [f"## Hierarchical all-reduce on simulated hosts ({len(result['layout'])} hosts, "
             f"{layout} workers, link {result['rate']})", "",
             f"float32 sum, numpy in place, median of rank 0. Ring: `{result['algorithms']['ring']}`; "
             f"hierarchical: `{result['algorithms']['hierarchical']}`; auto (the default) "
             + (f"takes the flat ring below {result['min_stripe_bytes']} bytes per process of a host. "
                if result.get("min_stripe_bytes") else "goes through the hosts at every size. ")
             + f"All three in one run, alternating call by call (`{result['command']}`).", "",
             "| size | flat ring | hierarchical | speedup | auto | auto vs ring | hier. algbw |",
             "|---|---|---|---|---|---|---|"]
    for nbytes, t in result["sizes"].items():
        n = int(nbytes)
        size = f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"
        lines.append(f"| {size} | {t['ring'] * 1e3:.2f} ms | {t['hierarchical'] * 1e3:.2f} ms | "
                     f"{t['ring'] / t['hierarchical']:.2f}x | {t['auto'] * 1e3:.2f} ms | "
                     f"{t['ring'] / t['auto']:.2f}x | {n / t['hierarchical'] / 1e9:.3f} GB/s |")
    sizes = result["sizes"]
    ratios = {n: t["ring"] / t["hierarchical"] for n, t in sizes.items()}
    auto = {n: t["ring"] / t["auto"] for n, t in sizes.items()}
    largest = max(sizes, key=int)
    lines += ["", f"Target: at least 1.35x the flat ring at the largest size, never slower: "
              f"{ratios[largest]:.2f}x at {int(largest) // MIB} MiB "
              f"({'met' if ratios[largest] >= 1.35 else 'missed'}); hierarchical's slowest ratio "
              f"{min(ratios.values()):.2f}x, auto's {min(auto.values()):.2f}x "
              f"({'never slower' if min(auto.values()) >= 0.95 else 'slower at some size'}; within 5% counts as "
              "equal, the noise of alternating calls here). "
              + _link_bounds(result, int(largest))]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", type=int, nargs="+", default=[2, 2], help="workers per host")
    parser.add_argument("--rate", default="1gbit", help="host 0's link rate (tc tbf)")
    parser.add_argument("--sizes", type=lambda s: [int(x) for x in s.split(",")], default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "hierarchical_allreduce.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.sizes = args.sizes or (QUICK_SIZES if args.quick else SIZES)
    if args.worker:
        worker(args)
        return
    sys.path.insert(0, os.path.join(ROOT, "tests", "multihost"))
    import hosts as simulated  # noqa: E402

    md_path = os.path.splitext(args.out)[0] + ".md"
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    reason = simulated.skip_reason()
    if reason:
        with open(md_path, "w") as f:
            f.write(f"## Hierarchical all-reduce on simulated hosts\n\nNot run: {reason}.\n")
        print(f"not run: {reason}")
        return
    command = "python benchmarks/hierarchical_allreduce.py" + (
        f" --layout {' '.join(map(str, args.layout))}" if args.layout != [2, 2] else "") + (
        f" --rate {args.rate}" if args.rate != "1gbit" else "") + (" --quick" if args.quick else "")
    with simulated.SimulatedHosts(len(args.layout)) as hosts:
        hosts.shape(0, rate=args.rate)
        addresses = [f"{hosts.hosts[h].address}:{BASE_PORT + local}"
                     for h, count in enumerate(args.layout) for local in range(count)]
        host_of = [h for h, count in enumerate(args.layout) for _ in range(count)]
        env = dict(os.environ, PYTHONPATH=ROOT, TFX_JOB_SECRET="hierarchical-benchmark",
                   BENCH_ADDRESSES=json.dumps(addresses), OMP_NUM_THREADS="1")
        procs = [hosts.popen(h, [sys.executable, os.path.abspath(__file__), "--worker",
                                 "--sizes", ",".join(map(str, args.sizes))] + (["--quick"] if args.quick else []),
                             cwd=ROOT, env=dict(env, BENCH_RANK=str(r)), stdout=-1, stderr=-1, text=True)
                 for r, h in enumerate(host_of)]
        outputs = simulated.wait_all(procs, args.timeout)
    failed = [(r, rc, err[-2000:]) for r, (rc, _, err) in enumerate(outputs) if rc != 0]
    if failed:
        raise SystemExit(f"workers failed: {failed}")
    line = next(l for l in outputs[0][1].splitlines() if l.startswith("RESULT "))
    result = json.loads(line[len("RESULT "):])
    from tfx_dist import settings  # noqa: E402

    result.update({"layout": args.layout, "rate": args.rate, "command": command,
                   "min_stripe_bytes": int(settings.get("TFX_HIERARCHICAL_MIN_STRIPE_BYTES")),
                   "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    with open(md_path, "w") as f:
        f.write(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
