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

With ``--ps K`` the launcher also starts K parameter servers (``ps0``, ...), which
serve one session per generation (``tfx_dist.parameter_server.elastic``). A lost
server is never taken for a lost worker: its tables are gone, so the job stops,
naming it; with ``--max-restarts N`` the whole job starts again (as the restart
path does, ``TFX_RESTART_COUNT`` counting), from the job's own checkpoint.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.launcher.console import Console
from tfx_dist.launcher.elastic_driver import Driver
from tfx_dist.launcher.elastic_hosts import HostDiscovery
from tfx_dist.launcher.parent_death import check_startable, dying_with_parent
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.relay import Relay
from tfx_dist.launcher.status import EXIT_CANNOT_START, EXIT_TIMEOUT, LaunchError, describe_exit, say

MAX_REPLACEMENTS_PER_SLOT = 3
_POLL_S = 0.05


class _Worker:
    """One worker process and its two relays."""

    def __init__(self, name: str, command: Sequence[str], env: dict, console: Console, hide: bool):
        self.name = name
        check_startable(command, env)
        self.proc = subprocess.Popen(dying_with_parent(command), env=env, stdin=subprocess.DEVNULL,
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

    def __init__(self, args: argparse.Namespace, command: Sequence[str], restart_count: int = 0):
        self.args, self.command, self.restart_count = args, list(command), restart_count
        self.secret = secrets.token_hex(32)
        self.driver = Driver(args.host, self.secret.encode(), args.min_workers)
        self.console = Console()
        self.workers: Dict[str, _Worker] = {}
        self.servers: Dict[str, _Worker] = {}
        self.addresses: Dict[str, str] = {}  # worker name -> its first listening address
        self.ps_addresses = [join_address(args.host, p) for p in pick_ports(args.host, args.ps)] \
            if args.ps else []
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

    def _environment(self, name: str, tf_config: str) -> dict:
        env = dict(os.environ)
        env.update(TF_CONFIG=tf_config, TFX_JOB_SECRET=self.secret, TFX_ELASTIC_DRIVER=self.driver.address,
                   TFX_ELASTIC_WORKER=name, TFX_RESTART_COUNT=str(self.restart_count))
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        return env

    def _start(self, name: str, env: dict, hide: bool) -> _Worker:
        try:
            return _Worker(name, self.command, env, self.console, hide=hide)
        except OSError as e:
            raise LaunchError(f"could not start {self.command[0]!r}: {e}") from None  # e.g. EMFILE

    def start_worker(self) -> str:
        name = f"w{self.started}"
        self.started += 1
        (port,) = pick_ports(self.args.host, 1)
        address = join_address(self.args.host, port)
        cluster = {"worker": [address], **({"ps": self.ps_addresses} if self.ps_addresses else {})}
        self.driver.add_worker(name, address)
        self.addresses[name] = address
        self.workers[name] = self._start(name, self._environment(name, make_tf_config(cluster, "worker", 0)),
                                         hide=not self.args.all_progress and self.started > 1)
        return name

    def start_servers(self) -> None:
        """The parameter servers (``--ps``): each learns the workers of a session from the driver
        (their TF_CONFIG names the first worker only, as a place holder)."""
        first = next(iter(self.addresses.values()))
        for index in range(len(self.ps_addresses)):
            name = f"ps{index}"
            self.driver.add_server(name)
            tf_config = make_tf_config({"worker": [first], "ps": self.ps_addresses}, "ps", index)
            self.servers[name] = self._start(name, self._environment(name, tf_config), hide=True)

    def lost_server(self) -> Optional[str]:
        """The first parameter server that exited while the job runs, or None."""
        for name, server in self.servers.items():
            if server.proc.poll() is not None:
                return name
        return None

    def running(self) -> List[str]:
        return [n for n, w in self.workers.items() if w.proc.returncode is None]

    def stop_all(self, grace: float) -> None:
        every = list(self.workers.values()) + list(self.servers.values())
        for worker in every:
            worker.kill(signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(w.proc.poll() is None for w in every):
            time.sleep(0.02)
        for worker in every:
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
    """Runs the elastic job to its end, again after a lost server while ``--max-restarts``
    allows; returns the launcher's exit status."""
    restart = 0
    while True:
        status, lost_server = _run_once(args, command, received, restart)
        if lost_server is None or received:
            return status
        if restart >= args.max_restarts:
            say(f"not restarting: parameter server {lost_server} was lost and --max-restarts "
                f"{args.max_restarts} restart(s) are used" if args.max_restarts else
                f"parameter server {lost_server} was lost: an elastic job replaces workers, not servers "
                f"(the tables it held are gone). Run with --max-restarts N (and --checkpoint-dir) to "
                f"restart the whole job from its last checkpoint")
            return status
        restart += 1
        say(f"restarting the job (TFX_RESTART_COUNT={restart}): parameter server {lost_server} was lost; "
            f"restart {restart} of {args.max_restarts}")


def _run_once(args: argparse.Namespace, command: Sequence[str], received: List[int],
              restart_count: int) -> Tuple[int, Optional[str]]:
    """One run of the elastic job: (exit status, the parameter server lost, if one was)."""
    try:
        job = ElasticJob(args, command, restart_count)
        for _ in range(min(args.num_workers, job.target())):
            job.start_worker()
        job.start_servers()
    except LaunchError as e:
        say(str(e))
        return EXIT_CANNOT_START, None
    say(f"elastic job: {len(job.workers)} worker(s), between {args.min_workers} and "
        f"{args.max_workers}" + (f", {len(job.servers)} parameter server(s)" if job.servers else "")
        + f"; driver at {job.driver.address}")
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    replacements_left = MAX_REPLACEMENTS_PER_SLOT * args.max_workers
    try:
        while True:
            if received:
                say(f"received {signal.Signals(received[0]).name}; stopping every worker")
                return 128 + received[0], None
            if deadline is not None and time.monotonic() >= deadline:
                say(f"timed out after {args.timeout:g} s (--timeout); stopping every worker")
                return EXIT_TIMEOUT, None
            job.reap()
            if job.members_done():
                if job.lost:
                    say(f"the job finished; lost and replaced on the way: {', '.join(job.lost)}")
                return 0, None
            for name in job.driver.take_dropped():
                say(f"worker {name} stayed silent while the others reset; stopping it")
                job.workers[name].kill(signal.SIGKILL)
            if job.driver.stopped:
                say(f"stopping the job: {job.driver.stopped}")
                job.report_lost()
                return _failure_status(job), None
            server = job.lost_server()
            if server is not None:
                code = job.servers[server].proc.returncode
                tail = job.servers[server].tail()
                say(f"parameter server {server} {describe_exit(code)}, a server and not a worker: the "
                    f"workers cannot go on without its tables; stopping the job"
                    + (f"; its last {len(tail)} stderr line(s):" if tail else ""))
                sys.stderr.write("".join(f"    {line}\n" for line in tail))
                return (128 - code if code < 0 else code) or 1, server
            running = len(job.running())
            if not job.finished and running < job.target() and replacements_left > 0:
                replacements_left -= 1
                name = job.start_worker()
                say(f"started worker {name} (it joins at the next reset)")
            elif running < args.min_workers and not job.finished and replacements_left <= 0:
                job.driver.stop(f"{running} worker(s) running, below --min-workers "
                                f"{args.min_workers}, and no replacement left to start")
            elif not running and job.finished:
                return 0, None
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
    if args.ps < 0 or args.max_restarts < 0:
        parser.error(f"--ps and --max-restarts must be at least 0; received {args.ps}, {args.max_restarts}")
    if args.max_restarts and not args.ps:
        parser.error("--elastic takes --max-restarts with --ps only (it restarts the job after a lost "
                     "parameter server; the elastic job replaces lost workers itself)")
