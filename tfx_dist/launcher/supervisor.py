"""Watches a running job: the first failure, the timeout or a signal stops every worker; the exit status."""

from __future__ import annotations

import signal
import sys
import time
from typing import List, Optional

from tfx_dist.launcher.status import EXIT_TIMEOUT, describe_exit, say, shell_exit_code
from tfx_dist.launcher.workers import Workers


def supervise(job: Workers, grace_period: float, timeout: Optional[float], received: List[int]) -> int:
    """Waits for the workers; on a failure, timeout or signal stops them all. Returns the exit status.

    ``received``: the signals the launcher got so far (filled by its signal handler).
    """
    n = len(job.procs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if received:
            signum = received[0]
            job.stop(grace_period)
            job.join_output()
            say(f"received {signal.Signals(signum).name}; stopped all {n} worker(s)")
            return 128 + signum
        codes = [p.poll() for p in job.procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            rank = failed[0]
            code = codes[rank]
            running = sum(1 for c in codes if c is None)
            job.stop(grace_period)
            job.join_output()
            who = f"rank {rank}" if job.labels[rank] == str(rank) else f"task {job.labels[rank]}"
            say(f"{who} {describe_exit(code)}"
                + (f"; stopped the other {running} worker(s)" if running else ""))
            tail = job.stderr_tail(rank)
            if tail:
                say(f"last {len(tail)} stderr line(s) of {who}:")
                sys.stderr.write("".join(f"    {line}\n" for line in tail))
                sys.stderr.flush()
            return shell_exit_code(code)
        if all(code == 0 for code in codes):
            job.join_output()
            return 0
        if deadline is not None and time.monotonic() >= deadline:
            job.stop(grace_period)
            job.join_output()
            say(f"timed out after {timeout:g} s (--timeout); stopped all {n} worker(s)")
            return EXIT_TIMEOUT
        time.sleep(0.02)
