"""tfx-dist-run from start to end: arguments, the launcher's signal handlers, each run of the job
(ports and environments, the workers, their supervision, the cleanup that always runs) and the
restarts between runs."""

from __future__ import annotations

import argparse
import signal
import time
from typing import List, Optional, Sequence

from tfx_dist.cluster.shm_segments import sweep_dead_segments
from tfx_dist.launcher.arguments import parse_arguments
from tfx_dist.launcher.cpus import cpu_shares
from tfx_dist.launcher.elastic import run_elastic
from tfx_dist.launcher.environment import engine_restart_count, task_labels, worker_environments
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.restarts import RestartPolicy
from tfx_dist.launcher.status import EXIT_CANNOT_START, EXIT_PREEMPTED, LaunchError, say
from tfx_dist.launcher.supervisor import Outcome, supervise
from tfx_dist.launcher.workers import Workers


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the launcher; returns the exit status (the console script exits with it)."""
    args, command = parse_arguments(argv)
    try:
        first_count = engine_restart_count()
    except LaunchError as e:
        say(str(e))
        return EXIT_CANNOT_START
    policy = RestartPolicy(args.max_restarts, args.num_workers, args.min_workers, args.slot_failures,
                           args.checkpoint_dir)
    received: List[int] = []
    running: List[Workers] = []  # the job's current run, for the signal handler

    def on_signal(signum, frame):
        received.append(signum)
        if len(received) > 1 and running:
            running[0].signal_all(signal.SIGKILL)  # asked twice: no more grace

    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    deadline = None if args.timeout is None else time.monotonic() + args.timeout
    try:
        if args.elastic:
            return run_elastic(args, command, received)
        outcome = None
        while True:
            if received:  # between two runs: nothing is running
                preempted = outcome is not None and outcome.preempted
                say(f"received {signal.Signals(received[0]).name}; not restarting the job")
                return EXIT_PREEMPTED if preempted else 128 + received[0]
            outcome = _run(args, command, policy.num_workers, first_count + policy.restarts,
                           first_run=outcome is None, deadline=deadline, received=received,
                           running=running)
            if not outcome.restartable:
                return outcome.status
            labels = task_labels(policy.num_workers, args.ps)
            if not policy.restart_after(outcome, labels, first_count + policy.restarts + 1):
                return outcome.status
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(args: argparse.Namespace, command: Sequence[str], num_workers: int, restart_count: int,
         first_run: bool, deadline: Optional[float], received: List[int],
         running: List[Workers]) -> Outcome:
    """Starts the job once with ``num_workers`` workers and supervises it to its end.

    ``deadline``: when ``--timeout`` ends, for all runs together.
    """
    num_tasks = num_workers + args.ps
    try:
        if args.port_base is not None and not first_run:
            # The same ports again: the workers bind them with SO_REUSEADDR, so the
            # connections of the run before, still in TIME_WAIT, do not block them.
            ports = list(range(args.port_base, args.port_base + num_tasks))
        else:
            ports = pick_ports(args.host, num_tasks, args.port_base)
        envs = worker_environments(num_workers, args.host, ports, num_ps=args.ps,
                                   restart_count=restart_count, checkpoint_dir=args.checkpoint_dir)
        cpu_sets = cpu_shares(num_tasks) if args.cpu_bind == "cores" else None
        job = Workers(command, envs, hide_progress=not args.all_progress, cpu_sets=cpu_sets,
                      labels=task_labels(num_workers, args.ps))
    except LaunchError as e:
        say(str(e))
        return Outcome(EXIT_CANNOT_START)
    running[:] = [job]
    try:
        timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
        return supervise(job, args.grace_period, timeout, received, timeout_option=args.timeout,
                         preemption_grace=args.preemption_grace)
    finally:
        job.stop(grace=args.grace_period)
        running.clear()
        # A worker killed during its shared-memory handshake leaves its
        # segment in /dev/shm: remove what dead processes left.
        sweep_dead_segments()
