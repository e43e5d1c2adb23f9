"""Cost of TFX_WIRE_PROTECTION on the cross-process all-reduce over TCP.

Two real processes on loopback with shared memory off (TFX_SHM=0, so every
byte crosses the TCP pair and, when on, its AES-256-GCM frames) all-reduce
64 MiB of float32 with `Communicator.allreduce_numpy` (the workers of
allreduce_multiprocess.py). Modes none / integrity / encrypt run side by
side, interleaved over rounds so that the machine's load hits each alike;
the median of every round's median is reported. Writes benchmarks/results/wire_protection.{json,md}.

    python benchmarks/wire_protection.py            # 3 rounds
    python benchmarks/wire_protection.py --rounds 5 --size-mib 64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import common  # noqa: E402

MODES = ("none", "integrity", "encrypt")
# Why the default is what it is (tfx_dist/settings.py), next to the figures it rests on.
DEFAULT_NOTE = (
    "Default: `integrity`, although it is not cheap here. Loopback is the worst case for this cost: "
    "its bytes move at memory speed, so the AES-GCM pass (about 3 GB/s per core on this machine, "
    "`openssl speed -evp aes-256-gcm`) and the copies it adds are all the difference, and these 2 "
    "shared cores run both ranks and their crypto. Between hosts the network is the bound and the "
    "relative cost should be smaller, but this was not measured (no second host here). Integrity is "
    "still the default because without it a relay on the path that flips bits gives every rank a wrong "
    "result and no error (tests/comm/test_wire_protection.py); `none` gives the cost back on a network "
    "you trust, `encrypt` also hides the data. Shared memory is never protected (it never leaves the host).")


def run_mode(mode: str, nbytes: int, timeout: float) -> dict:
    addresses = [f"127.0.0.1:{p}" for p in common.free_ports(2)]
    env = dict(os.environ, TFX_SHM="0", TFX_WIRE_PROTECTION=mode, TFX_JOB_SECRET=os.urandom(16).hex(),
               PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    procs = [subprocess.Popen([sys.executable, os.path.join(ROOT, "benchmarks", "allreduce_multiprocess.py"),
                               "--worker", "tfx_numpy", "--rank", str(r), "--addresses", json.dumps(addresses),
                               "--sizes", str(nbytes), "--quick"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(2)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        line = [x for x in out.splitlines() if x.startswith("RESULT ")]
        if p.returncode != 0 or not line:
            raise RuntimeError(f"worker failed (mode {mode}, rc {p.returncode}): {err[-2000:]}")
        results.append(json.loads(line[0][len("RESULT "):]))
    assert all(r["transport"] == "tcp" for r in results), results
    # The collective ends together on both ranks: rank 0's times stand for the job.
    return {"median_s": statistics.median(results[0][str(nbytes)]), "repeats": len(results[0][str(nbytes)])}


def markdown(report: dict) -> str:
    size = report["size_mib"]
    lines = ["# Wire protection of TCP connections (`TFX_WIRE_PROTECTION`)", "",
             f"{size} MiB float32 all-reduce, 2 processes over TCP on loopback (`TFX_SHM=0`), "
             "`Communicator.allreduce_numpy`.", "",
             f"Machine: {report['machine']}; {report['date']}; {report['rounds']} rounds, modes "
             "interleaved; median of each round's median. Rerun: `python benchmarks/wire_protection.py`.", "",
             "| `TFX_WIRE_PROTECTION` | latency | algbw | vs none |", "|---|---|---|---|"]
    base = report["modes"]["none"]["latency_ms"]
    for mode in MODES:
        r = report["modes"][mode]
        lines.append(f"| {mode} | {r['latency_ms']:.1f} ms | {r['algbw_GBps']:.2f} GB/s | "
                     f"{(r['latency_ms'] / base - 1) * 100:+.0f}% |")
    lines.append("")
    lines.append(DEFAULT_NOTE)
    lines.append("")
    lines.append("Per round (ms): " + "; ".join(
        f"{m}: {', '.join(f'{x * 1e3:.1f}' for x in report['modes'][m]['rounds_s'])}" for m in MODES))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size-mib", type=int, default=64)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "wire_protection.json"))
    args = parser.parse_args()
    nbytes = args.size_mib << 20
    rounds = {m: [] for m in MODES}
    for i in range(args.rounds):
        for mode in MODES:
            r = run_mode(mode, nbytes, args.timeout)
            rounds[mode].append(r["median_s"])
            print(f"round {i + 1}, {mode}: {r['median_s'] * 1e3:.1f} ms ({r['repeats']} repeats)", flush=True)
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds, "size_mib": args.size_mib,
              "modes": {}}
    for mode in MODES:
        med = statistics.median(rounds[mode])
        report["modes"][mode] = {"latency_ms": med * 1e3, "algbw_GBps": nbytes / med / 1e9, "rounds_s": rounds[mode]}
    md = markdown(report)
    common.write_outputs("wire_protection", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
