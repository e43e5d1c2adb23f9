"""What the timeline (TFX_TIMELINE / HOROVOD_TIMELINE) costs the cross-process all-reduce.

Two measurements, 2 processes on loopback, float32 sum all-reduce:

1. Timeline on vs off, in the same processes. Each rank runs many rounds; a
   round times a block of all-reduces per size in each of three settings, in
   an order that rotates from round to round: ``off``, ``on`` (the timeline
   started with ``Communicator.start_timeline`` before the block and stopped
   after it) and ``off'`` (off again: an A/A control that shows how far two
   blocks of the same setting differ on this machine). Per round and setting
   the latency is the slowest rank's block median; the report gives, over the
   rounds, the median and the spread (quartiles, min-max) of on/off and of
   off'/off. ``tfx (tf.function)`` and ``tfx (numpy)`` workers.

2. The disabled path vs a runtime with the timeline compiled out: the runtime
   is built a second time with ``-DTFX_TIMELINE_COMPILED_OUT`` (every
   recording point folds away; build/ops_timeline_compiled_out/), and numpy
   workers on the normal build (timeline never started: one relaxed atomic
   load per recording point) and on that build run in turn, rotating the
   order, with a second normal run per round as the A/A control.

The timeline files go to a temporary folder and are checked to be valid JSON.

    python benchmarks/timeline_overhead.py            # writes benchmarks/results/timeline_overhead.{json,md}
    python benchmarks/timeline_overhead.py --rounds 3 --sizes 4096 --compiled-out-rounds 0
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce_multiprocess as ar  # noqa: E402
import common  # noqa: E402

RESULTS = os.path.join(ar.ROOT, "benchmarks", "results")
COMPILED_OUT_DIR = os.path.join(ar.ROOT, "build", "ops_timeline_compiled_out")
SETTINGS = ("off", "on", "off'")


def _block_repeats(nbytes: int) -> int:
    # About 16 MiB per block and size: blocks short enough that many rounds fit.
    return int(max(10, min(200, (16 << 20) // nbytes)))


# --------------------------------------------------------------------------- workers

def _communicator(rank: int, addresses: list[str], numpy_only: bool, ops_dir: str | None):
    if numpy_only:  # no TensorFlow in this process
        import types

        pkg = types.ModuleType("tfx_dist")
        pkg.__path__ = [os.path.join(ar.ROOT, "tfx_dist")]
        sys.modules["tfx_dist"] = pkg
    sys.path.insert(0, ar.ROOT)
    if ops_dir:  # another build of the runtime (the compiled-out variant)
        from tfx_dist import _ops

        _ops._HERE = ops_dir
    from tfx_dist.comm import Communicator

    return Communicator(rank, len(addresses), addresses, timeout_s=120)


def _timer(impl: str, comm, nbytes: int):
    """A function that runs one all-reduce of ``nbytes`` and returns the seconds it took."""
    if impl == "tfx_tf":
        import tensorflow as tf

        from tfx_dist.comm import ops

        step = tf.function(lambda t: ops.all_reduce([t], comm, name="bench")[0])
        x = tf.ones([nbytes // 4], tf.float32)

        def once():
            t0 = time.perf_counter()
            step(x)
            return time.perf_counter() - t0
    else:
        import numpy as np

        x = np.ones(nbytes // 4, np.float32)

        def once():
            t0 = time.perf_counter()
            comm.allreduce_numpy([x], name="bench", out=[x])
            return time.perf_counter() - t0
    for _ in range(3):
        once()
    return once


def _worker_interleaved(args) -> dict:
    """Measurement 1: {setting: {size: [block median per round]}}."""
    addresses = json.loads(args.addresses)
    sizes = [int(s) for s in args.sizes.split(",")]
    comm = _communicator(args.rank, addresses, args.worker == "tfx_numpy", None)
    timers = {n: _timer(args.worker, comm, n) for n in sizes}
    out = {s: {str(n): [] for n in sizes} for s in SETTINGS}
    for r in range(args.rounds):
        order = SETTINGS[r % 3:] + SETTINGS[:r % 3]
        for setting in order:
            if setting == "on":
                comm.start_timeline(os.path.join(args.timeline_dir, f"{args.worker}_round{r}_%r.json"))
            for n in sizes:
                out[setting][str(n)].append(
                    statistics.median(timers[n]() for _ in range(_block_repeats(n))))
            if setting == "on":
                comm.stop_timeline()
    comm.close()
    return out


def _worker_plain(args) -> dict:
    """Measurement 2: {size: median} of numpy all-reduces on the runtime in ``--ops-dir``."""
    addresses = json.loads(args.addresses)
    sizes = [int(s) for s in args.sizes.split(",")]
    comm = _communicator(args.rank, addresses, True, args.ops_dir or None)
    out = {}
    for n in sizes:
        once = _timer("tfx_numpy", comm, n)
        out[str(n)] = statistics.median(once() for _ in range(args.repeats))
    comm.close()
    return out


# --------------------------------------------------------------------------- driver

def _launch(worker_args: list[str], timeout: float) -> list[dict]:
    """Runs 2 ranks of this script's worker (bound as tfx-dist-run binds) and returns their results."""
    addresses = [f"127.0.0.1:{p}" for p in common.free_ports(2)]
    env = dict(os.environ, TFX_JOB_SECRET=os.environ.get("TFX_JOB_SECRET") or os.urandom(16).hex(),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_CPU_ALLOCATOR_USE_BFC="true")
    env.pop("TFX_TIMELINE", None)
    env.pop("HOROVOD_TIMELINE", None)
    shares = ar.launcher_cpu_shares(2) or [None, None]
    cmd = [sys.executable, os.path.abspath(__file__), "--addresses", json.dumps(addresses)] + worker_args
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env,
                              preexec_fn=(lambda c=shares[r]: os.sched_setaffinity(0, c)) if shares[r] else None)
             for r in range(2)]
    return common.results_of_ranks(procs, f"timeline_overhead worker {worker_args}", timeout)


def spread(values: list[float]) -> dict:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2],
            "min": min(values), "max": max(values), "n": len(values)}


def interleaved(impl: str, sizes: list[int], rounds: int, timeline_dir: str, timeout: float) -> dict:
    outs = _launch(["--worker", impl, "--sizes", ",".join(map(str, sizes)), "--rounds", str(rounds),
                    "--timeline-dir", timeline_dir], timeout)
    result = {}
    for n in sizes:
        # The slowest rank bounds each block.
        lat = {s: [max(o[s][str(n)][r] for o in outs) for r in range(rounds)] for s in SETTINGS}
        result[str(n)] = {
            "latency_s": {s: statistics.median(v) for s, v in lat.items()},
            "on/off": spread([on / off for on, off in zip(lat["on"], lat["off"])]),
            "off'/off": spread([b / a for b, a in zip(lat["off'"], lat["off"])]),
        }
    return result


def build_compiled_out() -> str:
    """libtfx_comm built with -DTFX_TIMELINE_COMPILED_OUT into COMPILED_OUT_DIR (cached objects)."""
    sys.path.insert(0, ar.ROOT)
    import build_ops

    lib = next(lib for lib in build_ops.LIBRARIES if lib.name == "libtfx_comm")
    build_ops.build_library(lib, COMPILED_OUT_DIR, os.path.join(ar.ROOT, "build", "ops"), None,
                            extra_cflags=("-DTFX_TIMELINE_COMPILED_OUT",))
    shutil.copy(os.path.join(ar.ROOT, "tfx_dist", "_ops", "build_info.json"), COMPILED_OUT_DIR)
    return COMPILED_OUT_DIR


def compiled_out(sizes: list[int], rounds: int, repeats: int, timeout: float) -> dict:
    ops_dir = build_compiled_out()
    variants = ("default", "compiled_out", "default'")
    lat = {v: {str(n): [] for n in sizes} for v in variants}
    for r in range(rounds):
        for v in variants[r % 3:] + variants[:r % 3]:
            outs = _launch(["--worker", "plain", "--sizes", ",".join(map(str, sizes)), "--repeats",
                            str(repeats), "--ops-dir", ops_dir if v == "compiled_out" else ""], timeout)
            for n in sizes:
                lat[v][str(n)].append(max(o[str(n)] for o in outs))
    return {str(n): {"latency_s": {v: statistics.median(lat[v][str(n)]) for v in variants},
                     "default/compiled_out": spread([a / b for a, b in zip(lat["default"][str(n)],
                                                                            lat["compiled_out"][str(n)])]),
                     "default'/default": spread([b / a for a, b in zip(lat["default"][str(n)],
                                                                        lat["default'"][str(n)])])}
            for n in sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,262144,4194304")
    parser.add_argument("--rounds", type=int, default=30, help="interleaved rounds (measurement 1)")
    parser.add_argument("--impls", nargs="+", default=["tfx_tf", "tfx_numpy"])
    parser.add_argument("--compiled-out-sizes", default="4096,262144")
    parser.add_argument("--compiled-out-rounds", type=int, default=9,
                        help="process runs per variant (measurement 2; 0: skip it)")
    parser.add_argument("--compiled-out-repeats", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=os.path.join(RESULTS, "timeline_overhead.json"))
    # Worker mode (internal).
    parser.add_argument("--worker", choices=["tfx_tf", "tfx_numpy", "plain"])
    parser.add_argument("--rank", type=int)
    parser.add_argument("--addresses")
    parser.add_argument("--timeline-dir")
    parser.add_argument("--ops-dir", default="")
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    if args.worker:
        res = _worker_plain(args) if args.worker == "plain" else _worker_interleaved(args)
        print("RESULT " + json.dumps(res), flush=True)
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    report = {"command": "python " + " ".join(["benchmarks/timeline_overhead.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_average_before": os.getloadavg(), "sizes": sizes, "rounds": args.rounds,
              "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for impl in args.impls:
            report["results"][impl] = interleaved(impl, sizes, args.rounds, tmp, args.timeout)
        files = glob.glob(os.path.join(tmp, "*.json"))
        events = 0
        for path in files:
            with open(path) as f:
                events += len(json.load(f))
        report["timeline_files"], report["timeline_events"] = len(files), events
        report["timeline_bytes"] = sum(os.path.getsize(p) for p in files)
    if args.compiled_out_rounds:
        co_sizes = [int(s) for s in args.compiled_out_sizes.split(",")]
        report["compiled_out"] = {"sizes": co_sizes, "rounds": args.compiled_out_rounds,
                                  "repeats": args.compiled_out_repeats,
                                  "results": compiled_out(co_sizes, args.compiled_out_rounds,
                                                          args.compiled_out_repeats, args.timeout)}
    report["load_average_after"] = os.getloadavg()
    md = markdown(report)
    common.write_outputs("timeline_overhead", report, md, args.out)
    print(md)


def _ratio(s: dict) -> str:
    return f"{s['median']:.3f} | {s['q1']:.3f}-{s['q3']:.3f} | {s['min']:.2f}-{s['max']:.2f}"


def markdown(report: dict) -> str:
    la = report["load_average_before"], report["load_average_after"]
    lines = ["# Timeline overhead (cross-process all-reduce, 2 processes)", "",
             f"{report['date']}; load average (1 min) {la[0][0]:.1f} before, {la[1][0]:.1f} after, "
             "on 2 shared cores. Float32 sum all-reduce.", "",
             f"**On vs off, same processes.** {report['rounds']} rounds; each round times a block per "
             "size with the timeline off, on (`Communicator.start_timeline` before the block, "
             "`stop_timeline` after) and off again (off': the A/A control), in an order that rotates "
             "per round. Per round the latency is the slowest rank's block median; ratios are per "
             "round, then summarized over the rounds (median, quartiles, min-max). An on/off spread "
             "no wider than off'/off is cost the machine's noise hides. The timeline wrote "
             f"{report['timeline_files']} files, {report['timeline_events']} events, "
             f"{report['timeline_bytes'] / 1e6:.1f} MB, all valid JSON.", "",
             "| implementation | size | off (median) | on (median) | on/off median | quartiles | min-max "
             "| off'/off median | quartiles | min-max |", "|---" * 10 + "|"]
    for impl, by in report["results"].items():
        for n in report["sizes"]:
            r = by[str(n)]
            control = r["off'/off"]
            lines.append(f"| {ar.LABELS[impl]} | {ar._fmt_size(n)} | {r['latency_s']['off'] * 1e6:.0f} us | "
                         f"{r['latency_s']['on'] * 1e6:.0f} us | {_ratio(r['on/off'])} | {_ratio(control)} |")
    co = report.get("compiled_out")
    if co:
        lines += ["", f"**Disabled vs compiled out.** The runtime built a second time with "
                  "`-DTFX_TIMELINE_COMPILED_OUT` (no recording point left) against the normal build "
                  "with the timeline never started (a relaxed atomic load per recording point): "
                  f"numpy workers, {co['rounds']} process runs per variant in rotating order, "
                  f"{co['repeats']} all-reduces per size each, the slowest rank's median per run; "
                  "default' is a second run of the normal build (A/A control).", "",
                  "| size | default | compiled out | default/compiled out median | quartiles | min-max "
                  "| default'/default median | quartiles | min-max |", "|---" * 9 + "|"]
        for n in co["sizes"]:
            r = co["results"][str(n)]
            control = r["default'/default"]
            lines.append(f"| {ar._fmt_size(n)} | {r['latency_s']['default'] * 1e6:.0f} us | "
                         f"{r['latency_s']['compiled_out'] * 1e6:.0f} us | "
                         f"{_ratio(r['default/compiled_out'])} | {_ratio(control)} |")
    lines += ["", f"*Command: `{report['command']}`.*", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
