"""``tfx-dist-run --elastic``: the job goes on while workers are lost and replaced.

The launcher runs the elastic driver (``elastic_driver``) and starts the
workers, each with ``TFX_ELASTIC_DRIVER`` (the driver's address),
``TFX_ELASTIC_WORKER`` (its name: ``w0``, ``w1``, ...; output lines carry
it, ``[w3] ...``), the job secret and its own listening address (in
``TF_CONFIG``, as the first generation's cluster). Then, until the job ends:

- a worker that exits non-zero or dies is *lost*: the driver hears of it (the
  survivors' collectives fail with ``PeerLostError`` and they reset among
  themselves), and the launcher starts a replacement with a new name, which
  joins at the survivors' next reset (``joined``: rank 0 sends it the state);
- with ``--host-discovery-script``, the number of workers follows the slots
  the script prints (Horovod's contract: one ``host:slots`` line per available
  host), within ``--min-workers`` .. ``--max-workers``;
- a member that stays silent while the others reset is dropped by the driver
  and stopped here (SIGKILL), then replaced like a lost worker;
- fewer workers than ``--min-workers`` (none left to replace them): the job
  stops, and the launcher repeats the errors of every lost worker;
- the job ends with 0 once the members of the last generation exit 0 (workers
  still starting are stopped then).

Replacements are bounded (``MAX_REPLACEMENTS_PER_SLOT`` times ``--max-workers``),
so a program that fails every time does not run forever.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.launcher.console import Console
from tfx_dist.launcher.elastic_driver import Driver
from tfx_dist.launcher.elastic_hosts import HostDiscovery
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.relay import Relay
from tfx_dist.launcher.status import EXIT_CANNOT_START, EXIT_TIMEOUT, LaunchError, describe_exit, say

MAX_REPLACEMENTS_PER_SLOT = 3
_POLL_S = 0.05


class _Worker:
    """One worker process and its two relays."""

    def __init__(self, name: str, command: Sequence[str], env: dict, console: Console, hide: bool):
        self.name = name
        self.proc = subprocess.Popen(list(command), env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        prefix = f"[{name}] ".encode()
        out = getattr(sys.stdout, "buffer", sys.stdout)
        err = getattr(sys.stderr, "buffer", sys.stderr)
        self.relays = [Relay(name, self.proc.stdout, out, prefix, console, hide, False),
                       Relay(name, self.proc.stderr, err, prefix, console, hide, True)]
        for relay in self.relays:
            relay.start()

    def kill(self, sig: int) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def tail(self) -> List[str]:
        self.relays[1].join(2.0)
        return list(self.relays[1].tail or ())


class ElasticJob:
    """The worker processes of an elastic job and the driver that forms its generations."""

    def __init__(self, args: argparse.Namespace, command: Sequence[str]):
        self.args, self.command = args, list(command)
        self.secret = secrets.token_hex(32)
        self.driver = Driver(args.host, self.secret.encode(), args.min_workers)
        self.console = Console()
        self.workers: Dict[str, _Worker] = {}
        self.lost: Dict[str, int] = {}   # name -> returncode
        self.finished: List[str] = []
        self.started = 0
        self.hosts = HostDiscovery(args.host_discovery_script, args.host) \
            if args.host_discovery_script else None

    def target(self) -> int:
        """How many workers should run: --max-workers, or fewer when discovery offers fewer slots."""
        if self.hosts is None:
            return self.args.max_workers
        return min(self.args.max_workers, self.hosts.local_slots())

    def start_worker(self) -> str:
        name = f"w{self.started}"
        self.started += 1
        (port,) = pick_ports(self.args.host, 1)
        address = join_address(self.args.host, port)
        env = dict(os.environ)
        env.update(TF_CONFIG=make_tf_config({"worker": [address]}, "worker", 0),
                   TFX_JOB_SECRET=self.secret, TFX_ELASTIC_DRIVER=self.driver.address,
                   TFX_ELASTIC_WORKER=name)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        self.driver.add_worker(name, address)
        try:
            self.workers[name] = _Worker(name, self.command, env, self.console,
                                         hide=not self.args.all_progress and self.started > 1)
        except OSError as e:
            raise LaunchError(f"could not start {self.command[0]!r}: {e}") from None
        return name

    def running(self) -> List[str]:
        return [n for n, w in self.workers.items() if w.proc.returncode is None]

    def stop_all(self, grace: float) -> None:
        for worker in self.workers.values():
            worker.kill(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in self.workers.values()):
            time.sleep(0.02)
        for worker in self.workers.values():
            worker.kill(signal.SIGKILL)
            worker.proc.wait()

    def reap(self) -> None:
        """Tells the driver of every worker that exited since the last call."""
        for name, worker in self.workers.items():
            if name in self.lost or name in self.finished or worker.proc.poll() is None:
                continue
            code = worker.proc.returncode
            self.driver.worker_exited(name)
            if code == 0:
                self.finished.append(name)
                continue
            self.lost[name] = code
            left = len(self.running())
            say(f"worker {name} {describe_exit(code)}; {left} worker(s) still running")

    def members_done(self) -> bool:
        """The members of the last generation all exited 0."""
        generation = self.driver.generation()
        return bool(self.finished) and generation is not None and all(
            m in self.finished for m in generation.members)

    def report_lost(self) -> None:
        for name, code in self.lost.items():
            tail = self.workers[name].tail()
            say(f"worker {name} {describe_exit(code)}" + (f"; its last {len(tail)} stderr line(s):"
                                                          if tail else ""))
            sys.stderr.write("".join(f"    {line}\n" for line in tail))
        sys.stderr.flush()


def run_elastic(args: argparse.Namespace, command: Sequence[str], received: List[int]) -> int:
    """Runs the elastic job to its end; returns the launcher's exit status."""
    try:
        job = ElasticJob(args, command)
        for _ in range(min(args.num_workers, job.target())):
            job.start_worker()
    except LaunchError as e:
        say(str(e))
        return EXIT_CANNOT_START
    say(f"elastic job: {len(job.workers)} worker(s), between {args.min_workers} and "
        f"{args.max_workers}; driver at {job.driver.address}")
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    replacements_left = MAX_REPLACEMENTS_PER_SLOT * args.max_workers
    try:
        while True:
            if received:
                say(f"received {signal.Signals(received[0]).name}; stopping every worker")
                return 128 + received[0]
            if deadline is not None and time.monotonic() >= deadline:
                say(f"timed out after {args.timeout:g} s (--timeout); stopping every worker")
                return EXIT_TIMEOUT
            job.reap()
            for name in job.driver.take_dropped():
                say(f"worker {name} stayed silent while the others reset; stopping it")
                job.workers[name].kill(signal.SIGKILL)
            if job.driver.stopped:
                say(f"stopping the job: {job.driver.stopped}")
                job.report_lost()
                return _failure_status(job)
            if job.members_done():
                if job.lost:
                    say(f"the job finished; lost and replaced on the way: {', '.join(job.lost)}")
                return 0
            running = len(job.running())
            if not job.finished and running < job.target() and replacements_left > 0:
                replacements_left -= 1
                name = job.start_worker()
                say(f"started worker {name} (it joins at the next reset)")
            elif running < args.min_workers and not job.finished and replacements_left <= 0:
                job.driver.stop(f"{running} worker(s) running, below --min-workers "
                                f"{args.min_workers}, and no replacement left to start")
            elif not running and job.finished:
                return 0
            time.sleep(_POLL_S)
    finally:
        job.driver.close()
        job.stop_all(args.grace_period)


def _failure_status(job: ElasticJob) -> int:
    codes = list(job.lost.values())
    if not codes:
        return 1
    code = codes[0]
    return 128 - code if code < 0 else code


def elastic_arguments(parser: argparse.ArgumentParser) -> None:
    """Adds --elastic, --max-workers and --host-discovery-script to tfx-dist-run's parser."""
    parser.add_argument("--elastic", action="store_true",
                        help="elastic job: a lost worker does not stop the others; they go on among "
                             "themselves and a replacement joins (between --min-workers and "
                             "--max-workers workers; see docs/elastic.md)")
    parser.add_argument("--max-workers", type=int, default=None, metavar="N",
                        help="with --elastic: at most this many workers (default: -n)")
    parser.add_argument("--host-discovery-script", default=None, metavar="SCRIPT",
                        help="with --elastic: a program that prints one 'host:slots' line per "
                             "available host (Horovod's contract), run every few seconds")


def check_elastic_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            given: Optional[int]) -> None:
    """The checks of the elastic options (``given``: -n as given, or None)."""
    if not args.elastic:
        if args.max_workers is not None or args.host_discovery_script:
            parser.error("--max-workers and --host-discovery-script need --elastic")
        if given is None:
            parser.error("the following arguments are required: -n/--num-workers")
        return
    if args.max_workers is None:
        args.max_workers = given
    if args.max_workers is None:
        parser.error("--elastic needs --max-workers or -n")
    if args.min_workers is None:
        args.min_workers = 1
    if given is None:
        args.num_workers = args.max_workers
    if not 1 <= args.min_workers <= args.num_workers <= args.max_workers:
        parser.error(f"--elastic needs 1 <= --min-workers <= -n <= --max-workers; received "
                     f"{args.min_workers}, {args.num_workers}, {args.max_workers}")
    if args.ps or args.max_restarts:
        parser.error("--elastic does not take --ps or --max-restarts (parameter servers are not "
                     "elastic; the elastic job replaces workers itself)")
