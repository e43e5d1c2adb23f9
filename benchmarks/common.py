"""Helpers shared by the benchmarks: machine facts, memory-bandwidth probe, timing, markdown.

The machines these run on are shared and noisy, so every benchmark compares
its systems side by side in the same run: `interleave` times them in rounds,
in a fresh random order each round, and reports medians. Systems that need
their own process (two TensorFlow strategies in one process can collide) run
in `Worker` subprocesses that stay alive and take turns, so they interleave
too.

Nothing here imports TensorFlow: the benchmark scripts configure logical
devices before TensorFlow starts.
"""

from __future__ import annotations

import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
KIB, MIB = 1 << 10, 1 << 20


# --------------------------------------------------------------------------- machine

def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fused_reduce_isa() -> str:
    """The instructions TfxFusedReduce's CPU passes use in this process (see `TFX_CPU_ISA`)."""
    from tfx_dist import settings

    if settings.get("TFX_CPU_ISA") == "baseline":
        return "baseline (TFX_CPU_ISA=baseline)"
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        flags = []
    return "AVX2" if "avx2" in flags and platform.machine() == "x86_64" else "baseline"


def machine_info() -> dict:
    """Cores, CPU model, memory, load and library versions (TensorFlow's if already imported)."""
    info = {"cores": os.cpu_count(), "cpu": cpu_model(), "machine": platform.machine(),
            "python": platform.python_version(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
            "loadavg_1m": os.getloadavg()[0]}
    try:
        with open("/proc/meminfo") as f:
            info["mem_GiB"] = round(int(f.readline().split()[1]) / (1 << 20), 1)
    except OSError:
        pass
    tf = sys.modules.get("tensorflow")
    if tf is not None:
        info["tensorflow"] = tf.__version__
    keras = sys.modules.get("keras")
    if keras is not None:
        info["keras"] = keras.__version__
    import numpy as np
    info["numpy"] = np.__version__
    return info


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """Peak resident set size of this process so far (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def reset_peak_rss() -> bool:
    """Resets VmHWM to the current RSS (Linux >= 4.0); False where not permitted."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# --------------------------------------------------------------------------- memory bandwidth

class BandwidthProbe:
    """Streaming memory bandwidth with numpy, on arrays far larger than the caches.

    Probes (bytes counted = bytes the operation must read plus write):
      * ``copy``: ``np.copyto(b, a)``: 2 bytes per byte of ``a``;
      * ``add``: ``np.add(a, b, out=a)`` (in-place float32 add): 3 bytes per byte;
    each on 1 thread and on ``threads`` threads (numpy releases the GIL, so the
    threads each take a contiguous part of the arrays).
    """

    def __init__(self, nbytes: int = 128 * MIB, threads: int | None = None):
        import numpy as np

        self.threads = threads or os.cpu_count() or 1
        n = nbytes // 4
        self.a = np.ones(n, np.float32)
        self.b = np.ones(n, np.float32)
        self.nbytes = n * 4
        self.pool = ThreadPoolExecutor(self.threads)
        self._np = np

    def _parts(self, threads: int):
        n = self.a.size
        step = -(-n // threads)
        return [(i, min(n, i + step)) for i in range(0, n, step)]

    def _run(self, fn, threads: int) -> None:
        if threads == 1:
            fn(0, self.a.size)
        else:
            list(self.pool.map(lambda p: fn(*p), self._parts(threads)))

    def callables(self) -> dict[str, tuple[Callable[[], None], int]]:
        """name -> (one call, bytes it moves)."""
        np = self._np
        a, b = self.a, self.b

        def copy(i, j):
            np.copyto(b[i:j], a[i:j])

        def add(i, j):
            np.add(a[i:j], b[i:j], out=a[i:j])

        out = {}
        for threads in sorted({1, self.threads}):
            out[f"copy x{threads}"] = (lambda t=threads: self._run(copy, t), 2 * self.nbytes)
            out[f"add x{threads}"] = (lambda t=threads: self._run(add, t), 3 * self.nbytes)
        return out

    def measure(self, repeats: int = 7) -> dict[str, float]:
        """GB/s of every probe (median of `repeats`, after one warm-up), interleaved."""
        calls = {name: fn for name, (fn, _) in self.callables().items()}
        times = interleave(calls, rounds=repeats, inner=1, warmup=1)
        moved = {name: nbytes for name, (_, nbytes) in self.callables().items()}
        return {name: moved[name] / statistics.median(t) / 1e9 for name, t in times.items()}

    def close(self) -> None:
        self.pool.shutdown()


def bandwidth_summary(measurements: list[dict[str, float]]) -> dict:
    """Best median per probe over several measurements, and the overall best (the 'limit')."""
    per_probe = {}
    for m in measurements:
        for name, gbps in m.items():
            per_probe[name] = max(per_probe.get(name, 0.0), gbps)
    best = max(per_probe, key=per_probe.get)
    return {"probes_GBps": per_probe, "limit_GBps": per_probe[best], "limit_probe": best}


# --------------------------------------------------------------------------- timing

def interleave(calls: dict[str, Callable[[], object]], rounds: int, inner: int | dict = 1,
               warmup: int = 2, seed: int = 0) -> dict[str, list[float]]:
    """Times every callable in `rounds` rounds of `inner` calls each, in a fresh
    random order every round. Returns name -> per-call seconds (rounds*inner).

    `inner` may be a dict name -> calls per round (default 1), so that a very
    slow system does not eat the time budget of the others."""
    rng = random.Random(seed)
    names = list(calls)
    for name in names:
        for _ in range(warmup):
            calls[name]()
    times = {name: [] for name in names}
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            fn = calls[name]
            for _ in range(inner.get(name, 1) if isinstance(inner, dict) else inner):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
    return times


def median(xs) -> float:
    return statistics.median(xs)


def spread(xs) -> tuple[float, float]:
    """(25th, 75th) percentiles: how noisy the run was."""
    qs = statistics.quantiles(xs, n=4) if len(xs) >= 2 else [xs[0]] * 3
    return qs[0], qs[2]


# --------------------------------------------------------------------------- worker processes

class Worker:
    """A long-lived benchmark subprocess that answers JSON commands, one per line.

    The child runs ``serve(handler)``: it reads a JSON command per line on
    stdin, calls ``handler(command)`` and writes ``RESULT <json>`` on stdout.
    The parent sends commands to several workers in turn, so systems that
    each need their own process still interleave.
    """

    def __init__(self, argv: list[str], env: dict | None = None, name: str = ""):
        self.name = name or " ".join(argv)
        self.proc = subprocess.Popen(
            [sys.executable] + argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env=dict(os.environ, **(env or {}), TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1"))
        self._stderr: list[str] = []
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        for line in self.proc.stderr:
            self._stderr.append(line)
            del self._stderr[:-200]

    def call(self, command: dict, timeout: float = 600) -> dict:
        """Sends one command and waits for its result (raises with the child's stderr on failure)."""
        deadline = time.time() + timeout
        try:
            self.proc.stdin.write(json.dumps(command) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            raise RuntimeError(f"worker {self.name} died:\n{''.join(self._stderr)[-3000:]}")
        while True:
            if time.time() > deadline:
                self.close()
                raise TimeoutError(f"worker {self.name}: no answer to {command} in {timeout} s")
            line = self.proc.stdout.readline()
            if not line:
                self.proc.wait(timeout=10)
                raise RuntimeError(f"worker {self.name} exited ({self.proc.returncode}):\n"
                                   f"{''.join(self._stderr)[-3000:]}")
            if line.startswith("RESULT "):
                result = json.loads(line[7:])
                if "error" in result and result.get("fatal"):
                    raise RuntimeError(f"worker {self.name}: {result['error']}")
                return result

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()


def free_ports(n: int) -> list[int]:
    """``n`` loopback ports free right now (bound together, so all different)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def result_of(proc: subprocess.Popen, what: str, timeout_s: float, tag: str) -> dict:
    """The JSON a benchmark process printed after ``tag``; raises naming ``what`` when there is none."""
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"{what} gave no result within {timeout_s:.0f} s") from None
    for line in out.splitlines():
        if line.startswith(tag):
            return json.loads(line[len(tag):])
    raise RuntimeError(f"{what} exited {proc.returncode} without a result:\n{out[-3000:]}")


def results_of_ranks(procs: list[subprocess.Popen], what: str, timeout_s: float) -> list[dict]:
    """Each rank's ``RESULT <json>`` line, in rank order; the ranks still running at the end are killed."""
    outs = []
    try:
        for p in procs:
            try:
                o, e = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"{what} still running after {timeout_s} s") from None
            if p.returncode != 0:
                raise RuntimeError(f"{what} failed ({p.returncode}):\n{e[-3000:]}")
            outs.append(json.loads(next(line for line in o.splitlines() if line.startswith("RESULT "))[7:]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return outs


def serve(handler: Callable[[dict], dict]) -> None:
    """Child side of `Worker`: answer commands from stdin until it closes."""
    for line in sys.stdin:
        if not line.strip():
            continue
        command = json.loads(line)
        try:
            result = handler(command)
        except Exception as e:  # noqa: BLE001
            import traceback
            result = {"error": f"{type(e).__name__}: {e}", "fatal": True,
                      "traceback": traceback.format_exc()[-3000:]}
            sys.stderr.write(result["traceback"])
        sys.stdout.write("RESULT " + json.dumps(result) + "\n")
        sys.stdout.flush()


# --------------------------------------------------------------------------- output

def fmt_bytes(n: float) -> str:
    if n >= MIB:
        return f"{n / MIB:.3g} MiB"
    if n >= KIB:
        return f"{n / KIB:.3g} KiB"
    return f"{int(n)} B"


def table(header: list[str], rows: list[list[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def met(ok: bool | None) -> str:
    return "n/a" if ok is None else ("**met**" if ok else "**NOT met**")


def write_outputs(name: str, report: dict, markdown: str, out: str | None = None) -> tuple[str, str]:
    """Writes benchmarks/results/<name>.json and .md (or `out` and its .md)."""
    out = out or os.path.join(RESULTS, name + ".json")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(report, f, indent=1)
    md = os.path.splitext(out)[0] + ".md"
    with open(md, "w") as f:
        f.write(markdown.rstrip() + "\n")
    return out, md


def rewrite_markdown(name: str, out: str, markdown: Callable[[dict], str]) -> None:
    """``--markdown-only``: writes ``out``'s .md again from the report already in ``out``."""
    with open(out) as f:
        report = json.load(f)
    write_outputs(name, report, markdown(report), out)
