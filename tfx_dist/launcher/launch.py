"""tfx-dist-run from start to end: arguments, ports and environments, the workers, their supervision,
the launcher's signal handlers, and the cleanup that always runs."""

from __future__ import annotations

import signal
from typing import List, Optional, Sequence

from tfx_dist.cluster.shm_segments import sweep_dead_segments
from tfx_dist.launcher.arguments import parse_arguments
from tfx_dist.launcher.cpus import cpu_shares
from tfx_dist.launcher.environment import task_labels, worker_environments
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.status import EXIT_CANNOT_START, LaunchError, say
from tfx_dist.launcher.supervisor import supervise
from tfx_dist.launcher.workers import Workers


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the launcher; returns the exit status (the console script exits with it)."""
    args, command = parse_arguments(argv)
    try:
        ports = pick_ports(args.host, args.num_workers + args.ps, args.port_base)
        envs = worker_environments(args.num_workers, args.host, ports, num_ps=args.ps)
    except LaunchError as e:
        say(str(e))
        return EXIT_CANNOT_START

    received: List[int] = []

    def on_signal(signum, frame):
        received.append(signum)
        if len(received) > 1 and job is not None:
            job.signal_all(signal.SIGKILL)  # asked twice: no more grace

    job: Optional[Workers] = None
    handled = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, on_signal) for sig in handled}
    try:
        try:
            cpu_sets = cpu_shares(len(envs)) if args.cpu_bind == "cores" else None
            job = Workers(command, envs, hide_progress=not args.all_progress, cpu_sets=cpu_sets,
                          labels=task_labels(args.num_workers, args.ps))
        except LaunchError as e:
            say(str(e))
            return EXIT_CANNOT_START
        return supervise(job, args.grace_period, args.timeout, received)
    finally:
        if job is not None:
            job.stop(grace=args.grace_period)
            # A worker killed during its shared-memory handshake leaves its
            # segment in /dev/shm: remove what dead processes left.
            sweep_dead_segments()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
