"""Cross-process float32 sum all-reduce: tfx_dist.comm vs TensorFlow's own.

Runs N real processes on loopback for each implementation, in the same run:

  * ``tfx (tf.function)``: `tfx_dist.comm.ops.all_reduce` inside a
    ``tf.function`` (what a training step pays),
  * ``tfx (numpy)``: `Communicator.allreduce_numpy` in place (the runtime
    without TensorFlow around it),
  * ``tf MWMS RING``: ``tf.distribute.MultiWorkerMirroredStrategy`` with the
    RING implementation, one all-reduce in a ``tf.function`` (its own
    processes: two strategies in one process collide),
  * ``Horovod``: ``hvd.allreduce(x, op=hvd.Sum)`` in a ``tf.function``
    (benchmarks/horovod_allreduce.py under ``horovodrun --gloo``), when the
    virtual environment benchmarks/setup_horovod.sh builds is there
    (build/horovod-venv, or ``--horovod-venv``): Horovod 0.28.1 only builds
    against TensorFlow 2.12, so it runs in its own environment; without it
    the report says Horovod was not run,

plus this machine's limits measured in the same run: one loopback TCP stream
(one way) and memcpy. Reports median latency, algbw = bytes / time and
busbw = algbw * 2(n-1)/n (as nccl-tests does). Writes a JSON file and a
markdown section.

    python benchmarks/allreduce_multiprocess.py --quick
    python benchmarks/allreduce_multiprocess.py --nprocs 2 4 --out results.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
FULL_SIZES = [4 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
QUICK_SIZES = [4 * KIB, 256 * KIB, 4 * MIB, 64 * MIB]
IMPLS = ("tfx_tf", "tfx_numpy", "tf_mwms", "horovod")
LABELS = {"tfx_tf": "tfx (tf.function)", "tfx_numpy": "tfx (numpy)", "tf_mwms": "tf MWMS RING",
          "horovod": "Horovod (tf.function)"}
DEFAULT_HOROVOD_VENV = os.path.join(ROOT, "build", "horovod-venv")
HOROVOD_MISSING = "not run (build/horovod-venv missing; run benchmarks/setup_horovod.sh)"


def _repeats(nbytes: int, quick: bool) -> int:
    budget = (64 if quick else 256) * MIB  # bytes per size and implementation, roughly
    return int(max(3 if quick else 5, min(200 if quick else 500, budget // nbytes)))


# --------------------------------------------------------------------------- workers

def _time_loop(fn, nbytes: int, quick: bool) -> list[float]:
    for _ in range(3):
        fn()
    times = []
    for _ in range(_repeats(nbytes, quick)):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def _worker_tfx(impl: str, rank: int, addresses: list[str], sizes: list[int], quick: bool) -> dict:
    import numpy as np

    if impl == "tfx_numpy":  # no TensorFlow in this process
        import types

        pkg = types.ModuleType("tfx_dist")
        pkg.__path__ = [os.path.join(ROOT, "tfx_dist")]
        sys.modules["tfx_dist"] = pkg
    sys.path.insert(0, ROOT)
    from tfx_dist.comm import Communicator

    comm = Communicator(rank, len(addresses), addresses, timeout_s=120)
    out = {"transport": comm.transport((rank + 1) % len(addresses)) if len(addresses) > 1 else "self"}
    if impl == "tfx_tf":
        import tensorflow as tf

        from tfx_dist.comm import ops

        # The floor: what any tf.function call costs on this machine right now.
        trivial = tf.function(lambda t: t * 2.0)
        small = tf.ones([1024], tf.float32)
        out["tf_function_floor_ms"] = statistics.median(_time_loop(lambda: trivial(small), 4096, quick)) * 1e3
        step = tf.function(lambda t: ops.all_reduce([t], comm, name="bench")[0])
        for nbytes in sizes:
            x = tf.ones([nbytes // 4], tf.float32)
            out[str(nbytes)] = _time_loop(lambda: step(x), nbytes, quick)
            first = step(x).numpy()[:1]
            assert first[0] == len(addresses), first
    else:
        for nbytes in sizes:
            x = np.ones(nbytes // 4, np.float32)
            out[str(nbytes)] = _time_loop(lambda: comm.allreduce_numpy([x], name="bench", out=[x]),
                                          nbytes, quick)
    comm.close()
    return out


def _worker_tf_mwms(rank: int, addresses: list[str], sizes: list[int], quick: bool) -> dict:
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses},
                                          "task": {"type": "worker", "index": rank}})
    import tensorflow as tf

    options = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)

    def make_step(x):
        # The tensor enters through a closure: passing it in args= fails
        # under MWMS here ("destinations can not be empty").
        @tf.function
        def step():
            return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(x)))
        return step

    out = {"transport": "grpc"}
    for nbytes in sizes:
        step = make_step(tf.ones([nbytes // 4], tf.float32))
        out[str(nbytes)] = _time_loop(step, nbytes, quick)
        assert float(step().numpy()[0]) == len(addresses)
    return out


def _worker_main(args) -> None:
    addresses = json.loads(args.addresses)
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.worker == "tf_mwms":
        res = _worker_tf_mwms(args.rank, addresses, sizes, args.quick)
    else:
        res = _worker_tfx(args.worker, args.rank, addresses, sizes, args.quick)
    print("RESULT " + json.dumps(res), flush=True)


# --------------------------------------------------------------------------- limits

def measure_memcpy(nbytes: int = 64 * MIB) -> float:
    import numpy as np

    a = np.ones(nbytes // 4, np.float32)
    b = np.empty_like(a)
    times = []
    for _ in range(8):
        t0 = time.perf_counter()
        np.copyto(b, a)
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times[2:])


def measure_tcp(nbytes: int = 64 * MIB, rounds: int = 6) -> float:
    """One-way throughput of one loopback TCP stream (a receiver process)."""
    receiver = subprocess.Popen(
        [sys.executable, "-c", (
            "import socket,sys\n"
            "s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(1)\n"
            "print(s.getsockname()[1], flush=True)\n"
            "c,_=s.accept(); buf=bytearray(1<<20); v=memoryview(buf); n=0\n"
            "while True:\n"
            "    r=c.recv_into(v)\n"
            "    if not r: break\n"
            "    n+=r\n"
            f"    if n % {nbytes} == 0: c.sendall(b'k')\n")],
        stdout=subprocess.PIPE, text=True)
    port = int(receiver.stdout.readline())
    sock = socket.create_connection(("127.0.0.1", port))
    payload = memoryview(bytearray(nbytes))
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sock.sendall(payload)
        sock.recv(1)
        times.append(time.perf_counter() - t0)
    sock.close()
    receiver.wait(timeout=30)
    return nbytes / statistics.median(times[1:])


# --------------------------------------------------------------------------- driver

def launcher_cpu_shares(nprocs: int):
    """The CPUs tfx-dist-run would bind each of ``nprocs`` ranks to (None: it would not bind).

    Loads tfx_dist/run.py by path: it uses the standard library and
    tfx_dist.cluster only (and ``import tfx_dist`` loads nothing), so this works
    in Horovod's environment too, where tfx_dist is not installed.
    """
    import importlib.util

    if ROOT not in sys.path:  # run.py imports tfx_dist.cluster
        sys.path.insert(0, ROOT)

    spec = importlib.util.spec_from_file_location("_tfx_run", os.path.join(ROOT, "tfx_dist", "run.py"))
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    return run.cpu_shares(nprocs)


def run_impl(impl: str, nprocs: int, sizes: list[int], quick: bool, timeout: float,
             tf_bfc: bool = True, bind: bool = True) -> dict:
    addresses = [f"127.0.0.1:{p}" for p in common.free_ports(nprocs)]
    env = dict(os.environ, TFX_JOB_SECRET=os.environ.get("TFX_JOB_SECRET") or os.urandom(16).hex(),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    # TensorFlow's default CPU allocator returns buffers above glibc's mmap
    # threshold (32 MiB) to the kernel, so every step re-faults a fresh output
    # (seen: 64 MiB all-reduce 214 ms -> 32 ms with BFC). Applied to every
    # TensorFlow process of the run, TF's strategy included.
    env["TF_CPU_ALLOCATOR_USE_BFC"] = "true" if tf_bfc else "false"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", impl, "--addresses",
           json.dumps(addresses), "--sizes", ",".join(map(str, sizes))] + (["--quick"] if quick else [])
    # Each rank on the CPUs tfx-dist-run would give it.
    shares = (launcher_cpu_shares(nprocs) if bind else None) or [None] * nprocs
    procs = [subprocess.Popen(cmd + ["--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env,
                              preexec_fn=(lambda c=shares[r]: os.sched_setaffinity(0, c)) if shares[r] else None)
             for r in range(nprocs)]
    outs = common.results_of_ranks(procs, f"{impl} worker", timeout)
    result = {"transport": outs[0]["transport"]}
    if "tf_function_floor_ms" in outs[0]:
        result["tf_function_floor_ms"] = max(o["tf_function_floor_ms"] for o in outs)
    result.update(_summarize(outs, sizes, nprocs))
    return result


def _summarize(outs: list[dict], sizes: list[int], nprocs: int) -> dict:
    """Per-rank lists of seconds per size -> {"sizes": {size: latency, algbw, busbw, repeats}}."""
    result = {"sizes": {}}
    for nbytes in sizes:
        # The slowest rank bounds the collective: take each rank's median, then the max.
        med = max(statistics.median(o[str(nbytes)]) for o in outs)
        algbw = nbytes / med
        result["sizes"][str(nbytes)] = {"latency_ms": med * 1e3, "algbw_GBps": algbw / 1e9,
                                        "busbw_GBps": algbw * 2 * (nprocs - 1) / nprocs / 1e9,
                                        "repeats": len(outs[0][str(nbytes)])}
    return result


def run_horovod(venv: str, nprocs: int, sizes: list[int], quick: bool, timeout: float,
                tf_bfc: bool = True, bind: bool = True) -> dict:
    """benchmarks/horovod_allreduce.py under the venv's horovodrun (Gloo, localhost)."""
    import shutil
    import signal
    import tempfile

    tmp = tempfile.mkdtemp(prefix="tfx_horovod_")
    out = os.path.join(tmp, "horovod.json")
    base = [os.path.join(venv, "bin", "horovodrun"), "--gloo", "-np", str(nprocs), "-H",
            f"localhost:{nprocs}", "--start-timeout", "300", os.path.join(venv, "bin", "python"),
            os.path.join(ROOT, "benchmarks", "horovod_allreduce.py"), "--sizes",
            ",".join(map(str, sizes))]
    quick_arg = ["--quick"] if quick else []
    cmd = base + ["--out", out] + quick_arg
    # The same environment as the other TensorFlow processes (allocator included);
    # nothing of this interpreter's environment that would point the venv elsewhere.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               TF_CPU_ALLOCATOR_USE_BFC="true" if tf_bfc else "false",
               # horovod_allreduce.py binds itself as the other processes are bound.
               TFX_BENCH_CPU_BIND="cores" if bind else "none")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            cwd=ROOT, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=timeout)
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"horovodrun failed ({proc.returncode}):\n{log[-3000:]}")
        with open(out) as f:
            res = json.load(f)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    res.pop("times_s", None)
    res["command"] = " ".join([os.path.relpath(c, ROOT) if c.startswith(ROOT + os.sep) else c
                               for c in base] + ["--out", "FILE"] + quick_arg)
    # The same for every process count: "-np N -H localhost:N".
    res["command"] = res["command"].replace(f"-np {nprocs} -H localhost:{nprocs}", "-np N -H localhost:N")
    return res


def _fmt_size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def markdown(report: dict) -> str:
    lines = ["## Cross-process all-reduce (float32 sum, loopback)", "",
             f"Machine: {report['machine']}; {report['date']}. Limits measured in the same run: "
             f"one loopback TCP stream {report['limits']['tcp_one_way_GBps']:.2f} GB/s one way, "
             f"memcpy {report['limits']['memcpy_GBps']:.2f} GB/s. Latency is the median over "
             "repeats of the slowest rank; algbw = bytes / latency; busbw = algbw * 2(n-1)/n. "
             f"TensorFlow CPU allocator in every TF process: {report.get('tf_cpu_allocator', 'default')}"
             + (" (`TF_CPU_ALLOCATOR_USE_BFC=true`)." if report.get("tf_cpu_allocator") == "bfc" else ".")
             + (" Every implementation's rank r runs on the CPUs that `tfx-dist-run` binds rank r to "
                "(a disjoint share each; none when there are more processes than CPUs; `--cpu-bind none` "
                "to let processes float)."
                if report.get("cpu_bind") == "cores" else " Processes not bound to CPUs."),
             ""]
    hvd = next((r["horovod"] for r in report["results"].values() if "horovod" in r), None)
    if hvd:
        v = hvd.get("versions", {})
        lines += [f"Horovod column: Horovod {v.get('horovod', '?')} built with TensorFlow "
                  f"{v.get('tensorflow', '?')} and Gloo (no MPI) in its own virtual environment "
                  f"(Python {v.get('python', '?')}; `benchmarks/setup_horovod.sh` makes "
                  "`build/horovod-venv`), because Horovod 0.28.1 does not compile against this "
                  "project's TensorFlow. Run as `" + hvd.get("command", "horovodrun --gloo") + "`, "
                  "in turn with the other systems; it times `hvd.allreduce(x, op=hvd.Sum)` in a "
                  "`tf.function` with the same warm-up, repeats and statistic (the same code), "
                  "Horovod's defaults otherwise (tensor fusion, cycle time). "
                  "Speed-up vs Horovod = Horovod latency / tfx (tf.function) latency.", ""]
    if report.get("horovod"):
        lines += [f"Horovod: {report['horovod']}.", ""]
    for n, err in report.get("horovod_errors", {}).items():
        lines += [f"Horovod, {n} processes: failed (`{err}`).", ""]
    for n, by_impl in report["results"].items():
        impls = [i for i in IMPLS if i in by_impl]
        lines.append(f"### {n} processes")
        lines.append("")
        if "tf_function_floor_ms" in by_impl.get("tfx_tf", {}):
            hvd_floor = by_impl.get("horovod", {}).get("tf_function_floor_ms")
            lines.append(f"A trivial `tf.function` call (`t * 2.0` on 4 KiB) took "
                         f"{by_impl['tfx_tf']['tf_function_floor_ms']:.3f} ms in the same processes"
                         + (f" ({hvd_floor:.3f} ms in the Horovod processes, TensorFlow "
                            f"{by_impl['horovod'].get('versions', {}).get('tensorflow', '?')})"
                            if hvd_floor else "") + ".")
            lines.append("")
        ratios = [b for b in ("tf_mwms", "horovod") if b in impls and "tfx_tf" in impls]
        head = "| size | " + " | ".join(f"{LABELS[i]} ({by_impl[i]['transport']})" for i in impls)
        if ratios == ["tf_mwms"]:
            head += " | speed-up (tf.function) |"
        else:
            head += "".join(f" | speed-up vs {'MWMS' if b == 'tf_mwms' else 'Horovod'} (tf.function)"
                            for b in ratios) + " |"
        lines.append(head)
        lines.append("|---" * (len(impls) + 1 + len(ratios)) + "|")
        for size in report["sizes"]:
            row = [f"| {_fmt_size(size)}"]
            for i in impls:
                r = by_impl[i]["sizes"][str(size)]
                row.append(f"{r['latency_ms']:.3f} ms, {r['algbw_GBps']:.2f} GB/s algbw, "
                           f"{r['busbw_GBps']:.2f} busbw")
            for b in ratios:
                ratio = by_impl[b]["sizes"][str(size)]["latency_ms"] / \
                    by_impl["tfx_tf"]["sizes"][str(size)]["latency_ms"]
                row.append(f"{ratio:.1f}x")
            lines.append(" | ".join(row) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and repeats, 2 processes")
    parser.add_argument("--nprocs", type=int, nargs="+", default=None)
    parser.add_argument("--sizes", default=None, help="comma-separated byte counts")
    parser.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    parser.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results",
                                                      "allreduce_multiprocess.json"))
    parser.add_argument("--markdown", default=None, help="default: --out with .md")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--tf-default-allocator", action="store_true",
                        help="do not set TF_CPU_ALLOCATOR_USE_BFC=true in the TensorFlow processes")
    parser.add_argument("--cpu-bind", choices=("cores", "none"), default="cores",
                        help="cores: every implementation's rank r on the CPUs tfx-dist-run binds "
                             "rank r to; none: processes float (default: %(default)s)")
    parser.add_argument("--horovod-venv", default=None,
                        help="virtual environment with Horovod + TensorFlow 2.12 (default: "
                             "build/horovod-venv, made by benchmarks/setup_horovod.sh; the Horovod "
                             "baseline is skipped when it is missing)")
    # Worker mode (internal).
    parser.add_argument("--worker", choices=[i for i in IMPLS if i != "horovod"])
    parser.add_argument("--rank", type=int)
    parser.add_argument("--addresses")
    args = parser.parse_args()
    if args.worker:
        return _worker_main(args)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else (
        QUICK_SIZES if args.quick else FULL_SIZES)
    nprocs = args.nprocs or ([2] if args.quick else [2, 4])
    report = {"machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
              "date": time.strftime("%Y-%m-%d %H:%M"), "sizes": sizes, "quick": args.quick,
              "tf_cpu_allocator": "default" if args.tf_default_allocator else "bfc",
              "cpu_bind": args.cpu_bind, "limits": {}, "results": {}}
    report["limits"]["memcpy_GBps"] = measure_memcpy() / 1e9
    report["limits"]["tcp_one_way_GBps"] = measure_tcp() / 1e9
    print(f"limits: memcpy {report['limits']['memcpy_GBps']:.2f} GB/s, loopback TCP "
          f"{report['limits']['tcp_one_way_GBps']:.2f} GB/s", flush=True)
    impls = list(args.impls)
    if "horovod" in impls:
        venv = args.horovod_venv or DEFAULT_HOROVOD_VENV
        if not os.path.exists(os.path.join(venv, "bin", "horovodrun")):
            impls.remove("horovod")
            report["horovod"] = (HOROVOD_MISSING if args.horovod_venv is None else
                                 f"not run ({args.horovod_venv}/bin/horovodrun missing; run "
                                 "benchmarks/setup_horovod.sh)")
            print(f"Horovod: {report['horovod']}", flush=True)
    for n in nprocs:
        report["results"][str(n)] = {}
        for impl in impls:
            t0 = time.time()
            if impl == "horovod":
                # A baseline built outside this project: its failure is reported, not fatal.
                try:
                    report["results"][str(n)][impl] = run_horovod(
                        venv, n, sizes, args.quick, args.timeout, tf_bfc=not args.tf_default_allocator,
                        bind=args.cpu_bind == "cores")
                except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired) as e:
                    last = (str(e).strip().splitlines() or ["?"])[-1][:300]
                    report.setdefault("horovod_errors", {})[str(n)] = last
                    print(f"{n} procs, Horovod failed: {e}", flush=True)
                    continue
            else:
                report["results"][str(n)][impl] = run_impl(impl, n, sizes, args.quick, args.timeout,
                                                           tf_bfc=not args.tf_default_allocator,
                                                           bind=args.cpu_bind == "cores")
            summary = ", ".join(f"{_fmt_size(int(s))}: {r['latency_ms']:.3f} ms / {r['algbw_GBps']:.2f} GB/s"
                                for s, r in report["results"][str(n)][impl]["sizes"].items())
            floor = report["results"][str(n)][impl].get("tf_function_floor_ms")
            summary += f" (trivial tf.function: {floor:.3f} ms)" if floor else ""
            print(f"{n} procs, {LABELS[impl]} [{time.time() - t0:.0f} s]: {summary}", flush=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    md_path = args.markdown or os.path.splitext(args.out)[0] + ".md"
    with open(md_path, "w") as f:
        f.write(markdown(report) + "\n")
    print(markdown(report))
    print(f"wrote {args.out} and {md_path}")


if __name__ == "__main__":
    main()
