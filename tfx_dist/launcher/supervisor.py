"""Watches a running job: the first failure, the timeout or a signal stops every worker; the outcome."""

from __future__ import annotations

import dataclasses
import signal
import sys
import time
from typing import List, Optional

from tfx_dist.launcher.status import (EXIT_PREEMPTED, EXIT_TIMEOUT, describe_exit, say,
                                      shell_exit_code)
from tfx_dist.launcher.workers import Workers


@dataclasses.dataclass
class Outcome:
    """How one run of the job ended, and the status the launcher exits with if it stops there."""

    status: int
    rank: Optional[int] = None       # the rank that failed first (None: success, timeout, signal)
    code: Optional[int] = None       # its Popen.returncode (-N: killed by signal N)
    signum: Optional[int] = None     # the signal the launcher itself received
    stderr_tail: List[str] = dataclasses.field(default_factory=list)

    @property
    def restartable(self) -> bool:
        """A worker failed or was preempted, and nobody told the launcher to stop."""
        return self.rank is not None and self.signum is None

    @property
    def preempted(self) -> bool:
        return self.code == EXIT_PREEMPTED


def supervise(job: Workers, grace_period: float, timeout: Optional[float], received: List[int],
              timeout_option: Optional[float] = None, preemption_grace: Optional[float] = None) -> Outcome:
    """Waits for the workers; on a failure, timeout or signal stops them all. Returns the outcome.

    ``received``: the signals the launcher got so far (filled by its signal handler);
    ``timeout``: what is left of ``--timeout`` (``timeout_option``) for this run;
    ``grace_period``: from SIGTERM to SIGKILL after a failure or the timeout;
    ``preemption_grace``: the same when the job is being preempted (a signal to the
    launcher, a worker that exited 75): the workers are saving (default ``grace_period``).
    """
    if preemption_grace is None:
        preemption_grace = grace_period
    n = len(job.procs)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if received:
            return _stop_on_signal(job, preemption_grace, received[0])
        codes = [p.poll() for p in job.procs]
        failed = [rank for rank, code in enumerate(codes) if code not in (None, 0)]
        if failed:
            # A failure says more than a preemption that happened at the same time.
            rank = min(failed, key=lambda r: codes[r] == EXIT_PREEMPTED)
            code = codes[rank]
            if code == EXIT_PREEMPTED:
                _let_peers_finish(job, preemption_grace, received)  # they are saving too
                if received:
                    return _stop_on_signal(job, preemption_grace, received[0])
            running = sum(1 for p in job.procs if p.poll() is None)
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
            return Outcome(shell_exit_code(code), rank=rank, code=code, stderr_tail=tail)
        if all(code == 0 for code in codes):
            job.join_output()
            return Outcome(0)
        if deadline is not None and time.monotonic() >= deadline:
            job.stop(grace_period)
            job.join_output()
            total = timeout if timeout_option is None else timeout_option
            say(f"timed out after {total:g} s (--timeout); stopped all {n} worker(s)")
            return Outcome(EXIT_TIMEOUT)
        time.sleep(0.02)


def _let_peers_finish(job: Workers, grace_period: float, received: List[int]) -> None:
    """After one worker exited "preempted", gives the others the time to save and exit."""
    deadline = time.monotonic() + grace_period
    while (time.monotonic() < deadline and not received
           and any(p.poll() is None for p in job.procs)):
        time.sleep(0.02)


def _stop_on_signal(job: Workers, grace_period: float, signum: int) -> Outcome:
    """Passes the launcher's signal on as SIGTERM; "preempted" when the workers saved and said so.

    An engine may send its SIGTERM to every process of the job as well (Slurm
    does): a worker then gets two, and one that arrives while a worker that
    saved is already exiting kills it (Python restores the default handlers as
    it shuts down). So a worker that died of SIGTERM does not spoil "preempted"
    when others exited 75: a worker exits 75 only once the job's state is saved.
    """
    n = len(job.procs)
    job.stop(grace_period)
    job.join_output()
    codes = [p.returncode for p in job.procs]
    name = signal.Signals(signum).name
    saved = codes.count(EXIT_PREEMPTED)
    if saved and all(code in (0, EXIT_PREEMPTED, -signal.SIGTERM) for code in codes):
        who = f"all {n}" if saved == n else f"{saved} of {n}"
        others = "" if saved == n else " (the others exited 0 or died of SIGTERM)"
        say(f"received {name}; {who} worker(s) saved and exited {EXIT_PREEMPTED} (preempted){others}: "
            f"exiting {EXIT_PREEMPTED} so that the job is restarted")
        return Outcome(EXIT_PREEMPTED, signum=signum)
    exits = ", ".join(f"{'rank' if label.isdigit() else 'task'} {label} {describe_exit(code)}"
                      for label, code in zip(job.labels, codes) if code != 0)
    say(f"received {name}; stopped all {n} worker(s)" + (f" ({exits})" if exits else ""))
    return Outcome(128 + signum, signum=signum)
