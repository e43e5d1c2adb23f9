"""Cost of TFX_WIRE_PROTECTION on the parameter-server service's round trip.

One service server and one client, two real processes on loopback with
shared memory off (TFX_SHM=0: every byte crosses TCP and, when on, its
AES-256-GCM frames), the test worker tests/comm/service_worker.py: the client
echoes a payload (4 KiB, the size of a small lookup, and 1 MiB, a large
push) through the server, warmed up, then timed call by call. Modes none /
integrity / encrypt run side by side, interleaved over rounds so that the
machine's load hits each alike; the median of every round's p50 is reported.
Writes benchmarks/results/service_protection.{json,md}.

    python benchmarks/service_protection.py             # 3 rounds
    python benchmarks/service_protection.py --rounds 5
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

WORKER = os.path.join(ROOT, "tests", "comm", "service_worker.py")
MODES = ("none", "integrity", "encrypt")
SIZES = {4096: 2000, 1 << 20: 200}  # payload bytes -> timed calls


def run_mode(mode: str, nbytes: int, calls: int, timeout: float) -> dict:
    addresses = [f"127.0.0.1:{common.free_ports(1)[0]}"]
    env = dict(os.environ, TFX_SHM="0", TFX_WIRE_PROTECTION=mode, TFX_JOB_SECRET=os.urandom(16).hex(),
               PYTHONPATH=ROOT, PYTHONUNBUFFERED="1", SERVICE_LATENCY_BYTES=str(nbytes),
               SERVICE_LATENCY_CALLS=str(calls))
    procs = [subprocess.Popen([sys.executable, WORKER, role, "0", json.dumps(addresses), "1", scenario],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for role, scenario in (("server", "plain"), ("client", "latency"))]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError(f"service worker failed (mode {mode}, rc {p.returncode}): {err[-2000:]}")
        outs.append(out)
    line = [x for x in outs[1].splitlines() if x.startswith("RESULT ")]
    return json.loads(line[0][len("RESULT "):])


def markdown(report: dict) -> str:
    lines = ["# Wire protection of the parameter-server service (`TFX_WIRE_PROTECTION`)", "",
             "Round trip of one request echoed by a service server (the connections parameter servers use), "
             "1 server and 1 client process over TCP on loopback (`TFX_SHM=0`), Python client "
             "(`ServiceClient.call`, ctypes) timed call by call.", "",
             f"Machine: {report['machine']}; {report['date']}; {report['rounds']} rounds, modes interleaved; "
             "median of each round's p50 (p99 likewise). Rerun: `python benchmarks/service_protection.py`.", "",
             "| payload (each way) | `TFX_WIRE_PROTECTION` | p50 | p99 | p50 vs none |", "|---|---|---|---|---|"]
    for size in report["sizes"]:
        base = report["results"][size]["none"]["p50_us"]
        for mode in MODES:
            r = report["results"][size][mode]
            lines.append(f"| {common.fmt_bytes(int(size))} | {mode} | {r['p50_us']:.0f} us | "
                         f"{r['p99_us']:.0f} us | {(r['p50_us'] / base - 1) * 100:+.0f}% |")

    def per_round(size: str, mode: str) -> str:
        return ", ".join(f"{x:.0f}" for x in report["results"][size][mode]["rounds_p50_us"])
    lines += ["", "Per round p50 (us): " + "; ".join(
        f"{common.fmt_bytes(int(size))} {m}: {per_round(size, m)}" for size in report["sizes"] for m in MODES)]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "service_protection.json"))
    args = parser.parse_args()
    rounds = {str(size): {m: [] for m in MODES} for size in SIZES}
    for i in range(args.rounds):
        for size, calls in SIZES.items():
            for mode in MODES:
                r = run_mode(mode, size, calls, args.timeout)
                rounds[str(size)][mode].append(r)
                print(f"round {i + 1}, {size} B, {mode}: p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us",
                      flush=True)
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M"), "rounds": args.rounds, "sizes": list(rounds),
              "results": {}}
    for size, by_mode in rounds.items():
        report["results"][size] = {
            m: {"p50_us": statistics.median(r["p50_us"] for r in rs),
                "p99_us": statistics.median(r["p99_us"] for r in rs),
                "rounds_p50_us": [r["p50_us"] for r in rs]} for m, rs in by_mode.items()}
    md = markdown(report)
    common.write_outputs("service_protection", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
