"""tfx-dist-run: start N local worker processes of one training job.

Usage::

    tfx-dist-run -n 2 python train.py --epochs 3
    python -m tfx_dist.run -n 2 --timeout 600 -- python train.py

Each worker gets, on top of the launcher's own environment:

* ``TF_CONFIG``: ``{"cluster": {"worker": ["127.0.0.1:P0", ...]}, "task":
  {"type": "worker", "index": i}}``, with free ports (see :func:`pick_ports`);
  rank i is ``worker:i`` and rank 0 is the chief.
* ``TFX_JOB_SECRET``: a fresh ``secrets.token_hex(32)``, the same for every
  worker of this job and different for every job.
* ``PYTHONUNBUFFERED=1`` unless already set, so that lines arrive as printed.
* ``TF_CPU_ALLOCATOR_USE_BFC=true`` unless already set: TensorFlow's caching
  CPU allocator, so that large gradient buffers are not page-faulted in again
  every step.

CPUs (``--cpu-bind cores``, the default): each worker is bound to its own
share of the CPUs the launcher may use, whole physical cores where there are at
least as many as workers, as ``mpirun --bind-to core`` does (see
:func:`cpu_shares`). Threads of one worker then share its cores instead of
preempting the other workers' compute, and TensorFlow sizes its thread pools to
the share. With more workers than CPUs, or ``--cpu-bind none``, workers float.

Output: each line a worker writes to stdout or stderr is copied to the
launcher's stdout or stderr with its rank in front, ``[0] ...`` (padded to one
width from 10 workers on: ``[ 0] ``). Keras
progress-bar lines (those with "━", redrawn with ``\\r``) are shown for rank 0
only; ``--all-progress`` shows every rank's. The filtering happens here, in the
launcher, so the worker scripts need no change.

Exit: 0 when every worker exits 0. When a worker fails (exits non-zero or dies
by a signal), the others are stopped (SIGTERM to each worker's process group,
SIGKILL after ``--grace-period``), the launcher names the failing rank, repeats
its last stderr lines, and exits with its exit code (128+N for signal N). On
``--timeout``, it stops every worker and exits 124. On Ctrl-C, SIGTERM or
SIGHUP it stops every worker and exits 128+signal; a second Ctrl-C kills them
at once. On Linux the workers also get SIGKILL if the launcher itself is killed
(``PR_SET_PDEATHSIG``). Each worker runs in its own process group, so stopping
a worker also stops what it started (e.g. a shell's children).

All workers are ``worker`` tasks (no chief, ps or evaluator): rank 0,
``worker:0``, is the chief, as in MultiWorkerMirroredStrategy.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Deque, List, Optional, Sequence

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.cluster.shm_segments import sweep_dead_segments

# The standard library and tfx_dist.cluster only, on purpose: the launcher must
# start fast and must not load TensorFlow.

PROGRESS_BAR = "━".encode()  # U+2501, what Keras 3's progress bar draws
TAIL_LINES = 20              # stderr lines of a failed rank repeated at the end
EXIT_TIMEOUT = 124           # as coreutils' timeout(1)
HOLD_S = 0.2                 # how long an unfinished line waits for its end (see _Relay)
HOLD_BYTES = 1 << 20         # an unfinished line longer than this is passed on anyway
_LAUNCHER = "tfx-dist-run"


class LaunchError(RuntimeError):
    """The launcher could not start the job (bad arguments, no free ports)."""


# --- CPUs --------------------------------------------------------------------------------------

def _siblings(cpu: int) -> frozenset:
    """The logical CPUs of ``cpu``'s physical core (itself alone if the kernel does not say)."""
    path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return frozenset({cpu})
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _split(items: list, n: int) -> List[list]:
    """``items`` cut into ``n`` contiguous runs whose lengths differ by at most one."""
    size, extra = divmod(len(items), n)
    runs, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        runs.append(items[start:end])
        start = end
    return runs


def cpu_shares(num_workers: int, cpus: Optional[Sequence[int]] = None,
               siblings=_siblings) -> Optional[List[List[int]]]:
    """One disjoint list of CPUs per worker, or None where binding would not help.

    ``cpus`` defaults to the CPUs this process may run on. Whole physical cores
    (all their hardware threads) go to one worker when there are at least as
    many cores as workers; else single logical CPUs when there are enough;
    else None: with more workers than CPUs, binding would only keep the
    scheduler from moving a worker to a CPU that another leaves idle. None also
    for one worker (nothing to share) and where the OS cannot bind.
    """
    if cpus is None:
        if not hasattr(os, "sched_getaffinity"):
            return None
        cpus = os.sched_getaffinity(0)
    cpus = sorted(cpus)
    if num_workers < 2 or len(cpus) < num_workers:
        return None
    allowed = set(cpus)
    cores = sorted({frozenset(siblings(c) & allowed) or frozenset({c}) for c in cpus}, key=min)
    if len(cores) >= num_workers:
        return [sorted(c for core in run for c in core) for run in _split(cores, num_workers)]
    return _split(cpus, num_workers)


# --- ports -------------------------------------------------------------------------------------

def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))  # no SO_REUSEADDR: a port in TIME_WAIT counts as taken
        except OSError:
            return False
    return True


def _ephemeral_range() -> tuple:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def pick_ports(host: str, n: int, port_base: Optional[int] = None) -> List[int]:
    """Returns ``n`` distinct ports that are free on ``host``.

    With ``port_base``, the ports are ``port_base .. port_base+n-1``, and each
    must be free. Without, they are drawn at a random place in the ports
    *below* the kernel's ephemeral range (``ip_local_port_range``, usually
    32768-60999). Why: between this check and the worker's own bind() the port
    is unowned; a port from the ephemeral range could meanwhile be handed to
    any outgoing connection on the machine, while ports below it are only taken
    by explicit binds. A random start keeps two launchers on one machine apart.

    Raises:
      LaunchError: not enough free ports.
    """
    if port_base is not None:
        ports = list(range(port_base, port_base + n))
        if ports[0] < 1 or ports[-1] > 65535:
            raise LaunchError(f"--port-base {port_base} with -n {n} needs ports "
                              f"{ports[0]}..{ports[-1]}; ports must be in 1..65535")
        taken = [p for p in ports if not _port_is_free(host, p)]
        if taken:
            raise LaunchError(f"--port-base {port_base}: port(s) {taken} on {host} are in use; "
                              f"the job needs {ports[0]}..{ports[-1]} free")
        return ports
    low = 10000
    high = _ephemeral_range()[0] - 1
    if high - low < 4 * n:
        low, high = 1024, 65535
    span = high - low + 1
    start = random.randrange(span)
    ports: List[int] = []
    for i in range(span):
        port = low + (start + i) % span
        if _port_is_free(host, port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise LaunchError(f"found only {len(ports)} free ports on {host} in {low}..{high}, "
                      f"need {n}")


# --- output relay ------------------------------------------------------------------------------

class _Console:
    """Serializes what all relays write, so that lines of different ranks never mix.

    A relay may leave a line unterminated on screen (a progress bar redrawn with
    ``\\r``, a print without newline). If another relay writes meanwhile, the
    open line is ended first and its owner starts its next piece with a fresh
    prefix.
    """

    def __init__(self):
        self.lock = threading.Lock()
        self._open: Optional[_Relay] = None

    def write(self, relay: "_Relay", piece: bytes, complete: bool) -> None:
        with self.lock:
            if self._open is not None and self._open is not relay:
                self._open.interrupted = True
                self._end_line(self._open)
            if relay.interrupted:
                relay.interrupted = False
                if piece in (b"\n", b"\r\n"):
                    return  # the end of the line we already ended for it
            data = piece if relay.line_open else relay.prefix + piece
            relay.out.write(data)
            relay.out.flush()
            relay.line_open = not complete
            self._open = relay if relay.line_open else None

    def redraw(self, relay: "_Relay", piece: bytes) -> None:
        """Writes cursor movement (no text) if ``relay``'s line is still the one on screen."""
        with self.lock:
            if self._open is relay:
                relay.out.write(piece)
                relay.out.flush()
                relay.line_open = False
                self._open = None

    def end_line(self, relay: "_Relay") -> None:
        with self.lock:
            if relay.line_open:
                self._end_line(relay)

    def _end_line(self, relay: "_Relay") -> None:
        relay.out.write(b"\n")
        relay.out.flush()
        relay.line_open = False
        if self._open is relay:
            self._open = None


def _utf8_cut(data: bytes) -> int:
    """Returns the length of ``data`` without a trailing incomplete UTF-8 sequence."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return len(data)
        if byte >= 0xC0:  # lead byte: how long should its sequence be?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(data) if back >= need else len(data) - back
    return len(data)


class _Relay(threading.Thread):
    """Copies one pipe of one worker to the launcher's stream, prefixing each line with the rank.

    Terms: a *piece* is what the worker wrote up to and including a ``\\n``
    or ``\\r``, or the rest of what has arrived so far (then the line stays
    *open*). Whole lines are passed on as soon as they arrive; an unfinished
    one waits up to `HOLD_S` for its end. A line reaches the pipe in several
    writes (``print`` writes the text, then the newline), and a line passed on
    unfinished is ended early if another rank writes meanwhile, which split
    one line a rank printed into two. A line that stays unfinished (a prompt,
    a progress bar) still shows after `HOLD_S`.
    """

    def __init__(self, rank: int, pipe, out, prefix: bytes, console: _Console,
                 hide_progress: bool, keep_tail: bool):
        super().__init__(name=f"{_LAUNCHER}-relay-{rank}", daemon=True)
        self.pipe, self.out, self.prefix, self.console = pipe, out, prefix, console
        self.hide_progress = hide_progress
        self.line_open = False     # a piece of the current line is on screen
        self.interrupted = False   # another relay ended our open line for us
        self._hiding = False       # the current line is a hidden progress bar
        self.tail: Optional[Deque[str]] = collections.deque(maxlen=TAIL_LINES) if keep_tail else None
        self._tail_line = b""

    def run(self) -> None:
        fd = self.pipe.fileno()
        pending = b""
        try:
            while True:
                if pending and not select.select([fd], [], [], HOLD_S)[0]:
                    cut = _utf8_cut(pending)  # the line stays unfinished: show it open
                    ready, pending = pending[:cut], pending[cut:]
                    self._relay(ready)
                    continue
                try:
                    data = os.read(fd, 65536)
                except OSError:
                    data = b""
                if not data:
                    break
                pending += data
                end = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
                if len(pending) - end > HOLD_BYTES:
                    end = _utf8_cut(pending)
                ready, pending = pending[:end], pending[end:]
                if ready:
                    self._relay(ready)
            if pending:
                self._relay(pending)
            self.console.end_line(self)
            if self._tail_line and self.tail is not None:
                self.tail.append(self._tail_line.decode(errors="replace"))
        finally:
            self.pipe.close()

    def _relay(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            ends = [i for i in (data.find(b"\n", start), data.find(b"\r", start)) if i >= 0]
            end = min(ends) + 1 if ends else len(data)
            self._piece(data[start:end], complete=bool(ends))
            start = end

    def _piece(self, piece: bytes, complete: bool) -> None:
        self._remember(piece)
        if complete and not piece.strip(b"\b\r"):
            # Only cursor movement (Keras's "\b...\b\r" before each redraw): it
            # redraws this rank's open line if one is on screen, else means nothing.
            if not self._hiding:
                self.console.redraw(self, piece)
            self._hiding = False
            return
        if self.hide_progress and (self._hiding or PROGRESS_BAR in piece):
            if not self._hiding:
                self.console.end_line(self)  # a visible start of this line stays on its own
            self._hiding = not complete
            return
        self.console.write(self, piece, complete)

    def _remember(self, piece: bytes) -> None:
        if self.tail is None:
            return
        if piece.endswith(b"\r"):
            self._tail_line = b""       # the line is being redrawn: keep its latest version
        elif piece.endswith(b"\n"):
            line = (self._tail_line + piece).rstrip(b"\r\n")
            self.tail.append(line.decode(errors="replace"))
            self._tail_line = b""
        else:
            self._tail_line += piece


# --- the job -----------------------------------------------------------------------------------

def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"failed with exit code {code}"


def _shell_exit_code(code: int) -> int:
    return 128 - code if code < 0 else code


def _set_parent_death_signal():
    """In the child, before exec: die when the launcher dies, even by SIGKILL (Linux only)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _child_setup(cpus: Optional[Sequence[int]]):
    """What a worker runs between fork and exec."""
    def setup():
        _set_parent_death_signal()
        if cpus:
            os.sched_setaffinity(0, cpus)
    return setup


class _Job:
    """N worker processes, their relays, and how to stop them."""

    def __init__(self, command: Sequence[str], envs: Sequence[dict], hide_progress: bool,
                 cpu_sets: Optional[Sequence[Sequence[int]]] = None,
                 labels: Optional[Sequence[str]] = None):
        self.console = _Console()
        self.procs: List[subprocess.Popen] = []
        self.relays: List[_Relay] = []
        self.labels = list(labels) if labels else [str(rank) for rank in range(len(envs))]
        width = max(len(label) for label in self.labels)
        # Code between fork and exec (the parent-death signal, the CPU binding)
        # is only safe while this process has one thread; else the binding is
        # applied as soon as the worker has started (threads it starts at once
        # may escape it).
        in_child = sys.platform.startswith("linux") and threading.active_count() == 1
        try:
            for rank, env in enumerate(envs):
                cpus = cpu_sets[rank] if cpu_sets else None
                self.procs.append(subprocess.Popen(
                    list(command), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE, start_new_session=True,
                    preexec_fn=_child_setup(cpus) if in_child else None))
                if cpus and not in_child:
                    try:
                        os.sched_setaffinity(self.procs[-1].pid, cpus)
                    except ProcessLookupError:  # already gone: its exit code tells
                        pass
        except OSError as e:
            self.stop(grace=0)
            raise LaunchError(f"could not start {command[0]!r}: {e}") from None
        stdout = getattr(sys.stdout, "buffer", sys.stdout)
        stderr = getattr(sys.stderr, "buffer", sys.stderr)
        for rank, proc in enumerate(self.procs):
            prefix = f"[{self.labels[rank]:>{width}}] ".encode()
            hide = hide_progress and rank != 0
            self.relays.append(_Relay(rank, proc.stdout, stdout, prefix, self.console, hide, False))
            self.relays.append(_Relay(rank, proc.stderr, stderr, prefix, self.console, hide, True))
        for relay in self.relays:
            relay.start()

    def stderr_tail(self, rank: int) -> List[str]:
        return list(self.relays[2 * rank + 1].tail or ())

    def signal_all(self, sig: int) -> None:
        """Sends ``sig`` to the process group of every worker still running."""
        for proc in self.procs:
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, sig)  # the group: also a shell's children
                except (ProcessLookupError, PermissionError):
                    pass

    def stop(self, grace: float) -> None:
        """SIGTERM to every running worker, SIGKILL to those still running after ``grace`` seconds."""
        self.signal_all(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(0.02)
        self.signal_all(signal.SIGKILL)
        for proc in self.procs:
            proc.wait()

    def join_output(self, timeout: float = 5.0) -> None:
        """Waits for the relays to copy what is left (a grandchild may hold a pipe: bounded)."""
        deadline = time.monotonic() + timeout
        for relay in self.relays:
            relay.join(max(0.0, deadline - time.monotonic()))


# --- command line ------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=_LAUNCHER,
        description="Start N local worker processes of one tfx_dist / tf.distribute job, each "
                    "with its own TF_CONFIG (worker:i on HOST with a free port) and a shared "
                    "fresh TFX_JOB_SECRET. Output lines carry the rank: '[0] ...'. If a worker "
                    "fails, the others are stopped and its exit code is returned.",
        epilog="examples:\n"
               "  tfx-dist-run -n 2 python train.py --epochs 3\n"
               "  python -m tfx_dist.run -n 4 --timeout 900 -- python train.py\n\n"
               "exit status: 0 if all workers succeed; the failing rank's exit code (128+N "
               "if killed by signal N); 124 on --timeout; 128+N if the launcher got signal N; "
               "2 for bad arguments or when the job cannot start.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", "--num-workers", type=int, required=True, metavar="N",
                        help="number of worker processes (ranks 0..N-1; rank 0 is the chief)")
    parser.add_argument("--ps", type=int, default=0, metavar="P",
                        help="also start P parameter-server tasks (ps:0..P-1, shown as "
                             "'[ps0] ...'), for tfx_dist.ParameterServerStrategy; they run the "
                             "same command and exit once the workers are done")
    parser.add_argument("--timeout", type=float, default=None, metavar="SECONDS",
                        help="stop all workers and exit 124 after this many seconds")
    parser.add_argument("--host", default="127.0.0.1",
                        help="address the workers listen on and find each other at "
                             "(default: %(default)s)")
    parser.add_argument("--port-base", type=int, default=None, metavar="PORT",
                        help="use ports PORT..PORT+N-1 (default: free ports picked at random "
                             "below the ephemeral range)")
    parser.add_argument("--grace-period", type=float, default=5.0, metavar="SECONDS",
                        help="when stopping workers, wait this long after SIGTERM before "
                             "SIGKILL (default: %(default)s)")
    parser.add_argument("--cpu-bind", choices=("cores", "none"), default="cores",
                        help="cores: bind each worker to its own share of this launcher's "
                             "CPUs, whole physical cores where there are enough, like mpirun's "
                             "--bind-to core (skipped when there are more workers than CPUs); "
                             "none: workers float over all CPUs (default: %(default)s)")
    parser.add_argument("--all-progress", action="store_true",
                        help="show Keras progress bars of every rank (default: rank 0 only)")
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="the program each worker runs, with its arguments")
    return parser


def task_labels(num_workers: int, num_ps: int = 0) -> List[str]:
    """How output lines name each task: the worker's rank, then ``ps0``, ``ps1``..."""
    return [str(rank) for rank in range(num_workers)] + [f"ps{i}" for i in range(num_ps)]


def worker_environments(num_workers: int, host: str, ports: Sequence[int],
                        base: Optional[dict] = None, num_ps: int = 0) -> List[dict]:
    """Returns each task's environment: ``base`` (default ``os.environ``) plus TF_CONFIG and the secret.

    The workers come first (ranks 0..N-1, on ``ports[:N]``), then the ``num_ps``
    parameter servers (on the next ports).
    """
    base = dict(os.environ if base is None else base)
    addresses = [join_address(host, port) for port in ports]
    cluster = {"worker": addresses[:num_workers]}
    if num_ps:
        cluster["ps"] = addresses[num_workers:num_workers + num_ps]
    tasks = [("worker", rank) for rank in range(num_workers)] + [("ps", i) for i in range(num_ps)]
    secret = secrets.token_hex(32)
    envs = []
    for task_type, index in tasks:
        env = dict(base)
        env["TF_CONFIG"] = make_tf_config(cluster, task_type, index)
        env["TFX_JOB_SECRET"] = secret
        env.setdefault("PYTHONUNBUFFERED", "1")
        # TensorFlow's default CPU allocator hands large buffers back to the
        # OS, so every step page-faults its gradient buffers in again, which
        # costs more than reducing them (see BENCHMARKS.md); its caching
        # allocator keeps them.
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        envs.append(env)
    return envs


def _say(message: str) -> None:
    sys.stderr.write(f"{_LAUNCHER}: {message}\n")
    sys.stderr.flush()


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the launcher; returns the exit status (the console script exits with it)."""
    parser = _parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        parser.error("missing the command to run, e.g.: tfx-dist-run -n 2 python train.py")
    if args.num_workers < 1:
        parser.error(f"-n/--num-workers must be at least 1, received {args.num_workers}")
    if args.timeout is not None and args.timeout <= 0:
        parser.error(f"--timeout must be positive, received {args.timeout}")
    if args.ps < 0:
        parser.error(f"--ps must be at least 0, received {args.ps}")
    try:
        ports = pick_ports(args.host, args.num_workers + args.ps, args.port_base)
        envs = worker_environments(args.num_workers, args.host, ports, num_ps=args.ps)
    except LaunchError as e:
        _say(str(e))
        return 2

    received: List[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        if len(received) > 1 and job is not None:
            job.signal_all(signal.SIGKILL)  # asked twice: no more grace

    job: Optional[_Job] = None
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    try:
        try:
            cpu_sets = cpu_shares(len(envs)) if args.cpu_bind == "cores" else None
            job = _Job(command, envs, hide_progress=not args.all_progress, cpu_sets=cpu_sets,
                       labels=task_labels(args.num_workers, args.ps))
        except LaunchError as e:
            _say(str(e))
            return 2
        return _supervise(job, args, received)
    finally:
        if job is not None:
            job.stop(grace=args.grace_period)
            # A worker killed during its shared-memory handshake leaves its
            # segment in /dev/shm: remove what dead processes left.
            sweep_dead_segments()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _supervise(job: _Job, args, received: List[int]) -> int:
    """Waits for the workers; on a failure, timeout or signal stops them all. Returns the exit status.

    ``received``: the signals the launcher got so far (filled by main()'s handler).
    """
    n = len(job.procs)
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    while True:
        if received:
            signum = received[0]
            job.stop(args.grace_period)
            job.join_output()
            _say(f"received {signal.Signals(signum).name}; stopped all {n} worker(s)")
            return 128 + signum
        codes = [p.poll() for p in job.procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank = failed[0]
            code = codes[rank]
            running = sum(1 for c in codes if c is None)
            job.stop(args.grace_period)
            job.join_output()
            who = f"rank {rank}" if job.labels[rank] == str(rank) else f"task {job.labels[rank]}"
            _say(f"{who} {_describe_exit(code)}"
                 + (f"; stopped the other {running} worker(s)" if running else ""))
            tail = job.stderr_tail(rank)
            if tail:
                _say(f"last {len(tail)} stderr line(s) of {who}:")
                sys.stderr.write("".join(f"    {line}\n" for line in tail))
                sys.stderr.flush()
            return _shell_exit_code(code)
        if all(code == 0 for code in codes):
            job.join_output()
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            job.stop(args.grace_period)
            job.join_output()
            _say(f"timed out after {args.timeout:g} s (--timeout); stopped all {n} worker(s)")
            return EXIT_TIMEOUT
        time.sleep(0.02)



if __name__ == "__main__":
    sys.exit(main())
