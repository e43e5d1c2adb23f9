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
- with ``--host-discovery-script``, the workers follow the slots the script
  prints (Horovod's contract: one ``host:slots`` line per available host),
  within ``--min-workers`` .. ``--max-workers``: on this host they start here,
  on the others through the remote shell (``remote_shell``, ``remote_worker``:
  ssh by default, the secret on its standard input); a worker whose host left
  the list (or offers fewer slots) is stopped, a lost worker like any other;
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
import sys
import time
from typing import Dict, List, Optional, Sequence, Tuple

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.launcher.console import Console
from tfx_dist.launcher.elastic_driver import Driver
from tfx_dist.launcher.elastic_hosts import HostDiscovery, address_toward, is_this_host
from tfx_dist.launcher.elastic_processes import JobProcess
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.remote_shell import RemoteShell, first_line, starter_command_line
from tfx_dist.launcher.status import EXIT_CANNOT_START, EXIT_TIMEOUT, LaunchError, describe_exit, say

MAX_REPLACEMENTS_PER_SLOT = 3
_POLL_S = 0.05


class ElasticJob:
    """The worker processes of an elastic job, the hosts they run on, and the driver that forms its
    generations."""

    def __init__(self, args: argparse.Namespace, command: Sequence[str], restart_count: int = 0):
        self.args, self.command, self.restart_count = args, list(command), restart_count
        self.secret = secrets.token_hex(32)
        self.hosts = HostDiscovery(args.host_discovery_script) if args.host_discovery_script else None
        self.host = args.host or self._address_toward_the_hosts()
        self.driver = Driver(self.host, self.secret.encode(), args.min_workers)
        self.shell = RemoteShell(args.remote_shell, args.ssh_port, args.ssh_identity_file)
        self.console = Console()
        self.workers: Dict[str, JobProcess] = {}
        self.servers: Dict[str, JobProcess] = {}
        self.ps_addresses = [join_address(self.host, p) for p in pick_ports(self.host, args.ps)] \
            if args.ps else []
        self.lost: Dict[str, int] = {}   # name -> returncode
        self.finished: List[str] = []
        self.started = 0
        self.stopping: set = set()       # workers stopped here: their host left or offers fewer slots

    def _address_toward_the_hosts(self) -> str:
        """Without --host: 127.0.0.1, or this host's address toward the first other host the
        discovery script lists (the driver and this host's workers must be reachable from there)."""
        for host in self.hosts.hosts():
            address = None if is_this_host(host, "127.0.0.1") else address_toward(host)
            if address:
                say(f"listening at {address}, this host's address toward {host}")
                return address
        return "127.0.0.1"

    def slots(self) -> Dict[str, int]:
        """``{host: slots}`` the workers may use: this host only (--max-workers) without discovery."""
        if self.hosts is None:
            return {self.host: self.args.max_workers}
        return self.hosts.usable(self.host)

    def target(self) -> int:
        """How many workers should run: --max-workers, or fewer when discovery offers fewer slots."""
        return min(self.args.max_workers, sum(self.slots().values()))

    def _running_on(self) -> Dict[str, List[str]]:
        running_on: Dict[str, List[str]] = {}
        for name in self.running():
            if name not in self.stopping:
                running_on.setdefault(self.workers[name].host, []).append(name)
        return running_on

    def _free_host(self) -> Optional[str]:
        """The first host with a free slot, in the discovery script's order."""
        running_on = self._running_on()
        return next((host for host, slots in self.slots().items()
                     if len(running_on.get(host, ())) < slots), None)

    def stop_surplus(self) -> None:
        """Stops the newest workers of a host that left the discovery output or offers fewer slots
        than it runs now: lost workers, which the survivors go on without."""
        if self.hosts is None:
            return
        slots = self.slots()
        for host, names in self._running_on().items():
            for name in names[slots.get(host, 0):]:
                say(f"host {host} " + (f"offers {slots[host]} slot(s) now" if host in slots else
                                       "is no longer listed by --host-discovery-script")
                    + f": stopping worker {name} there (a lost worker)")
                self.stopping.add(name)
                self.workers[name].kill(signal.SIGKILL)

    def _environment(self, name: str, tf_config: Optional[str]) -> dict:
        env = dict(os.environ)
        env.update(TFX_JOB_SECRET=self.secret, TFX_ELASTIC_DRIVER=self.driver.address,
                   TFX_ELASTIC_WORKER=name, TFX_RESTART_COUNT=str(self.restart_count))
        if tf_config is not None:
            env["TF_CONFIG"] = tf_config
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
        return env

    def start_worker(self) -> Optional[str]:
        """Starts a worker on the first host with a free slot; its name, or None if none is free."""
        host = self._free_host()
        if host is None:
            return None
        name = f"w{self.started}"
        self.started += 1
        hide = not self.args.all_progress and self.started > 1
        others = {"ps": self.ps_addresses} if self.ps_addresses else {}
        if is_this_host(host, self.host):
            address = join_address(self.host, pick_ports(self.host, 1)[0])
            self.driver.add_worker(name, address)
            env = self._environment(name, make_tf_config({"worker": [address], **others}, "worker", 0))
            self.workers[name] = JobProcess(name, self.command, env, self.console, hide, host=host)
        else:  # it picks its port there and tells the driver (remote_worker)
            self.driver.add_worker(name, None)
            line = first_line(name, host, self.driver.address, others, self._environment(name, None),
                              self.command)
            self.workers[name] = JobProcess(name, self.shell.argv(host, starter_command_line()),
                                            dict(os.environ), self.console, hide, line, host)
        return name

    def where(self, name: str) -> str:
        host = self.workers[name].host
        return "" if host is None or is_this_host(host, self.host) else f" on {host}"

    def start_servers(self) -> None:
        """The parameter servers (``--ps``), on this host: each learns the workers of a session from
        the driver (their TF_CONFIG names the driver's address as a place holder worker)."""
        for index in range(len(self.ps_addresses)):
            name = f"ps{index}"
            self.driver.add_server(name)
            cluster = {"worker": [self.driver.address], "ps": self.ps_addresses}
            env = self._environment(name, make_tf_config(cluster, "ps", index))
            self.servers[name] = JobProcess(name, self.command, env, self.console, hide=True)

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
            code = worker.returncode()
            if name in self.lost or name in self.finished or code is None:
                continue
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
    hosts = sorted({job.workers[name].host for name in job.workers if job.where(name)})
    say(f"elastic job: {len(job.workers)} worker(s)" + (f" (on {', '.join(hosts)} too)" if hosts else "")
        + f", between {args.min_workers} and "
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
            job.stop_surplus()
            running = len(job.running())
            if not job.finished and running < job.target() and replacements_left > 0:
                name = job.start_worker()
                if name is not None:
                    replacements_left -= 1
                    say(f"started worker {name}{job.where(name)} (it joins at the next reset)")
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
