"""Starts the worker processes (own process group, CPU binding, death with the launcher) and stops them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import List, Optional, Sequence

from tfx_dist.launcher.console import Console
from tfx_dist.launcher.parent_death import check_startable, dying_with_parent
from tfx_dist.launcher.relay import Relay
from tfx_dist.launcher.status import LaunchError, say


class Workers:
    """N worker processes, their relays, and how to stop them."""

    def __init__(self, command: Sequence[str], envs: Sequence[dict], hide_progress: bool,
                 cpu_sets: Optional[Sequence[Sequence[int]]] = None,
                 labels: Optional[Sequence[str]] = None):
        self.console = Console()
        self.procs: List[subprocess.Popen] = []
        self.relays: List[Relay] = []
        self.labels = list(labels) if labels else [str(rank) for rank in range(len(envs))]
        width = max(len(label) for label in self.labels)
        # Each worker starts bound to its CPUs and dies with the launcher (``parent_death``).
        try:
            for rank, env in enumerate(envs):
                check_startable(command, env)
                cpus = cpu_sets[rank] if cpu_sets else None
                self.procs.append(subprocess.Popen(
                    dying_with_parent(command, cpus), env=env, stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True))
        except (OSError, LaunchError) as e:
            self.stop(grace=0)
            raise LaunchError(f"could not start {command[0]!r}: {e}" if isinstance(e, OSError)
                              else str(e)) from None
        stdout = getattr(sys.stdout, "buffer", sys.stdout)
        stderr = getattr(sys.stderr, "buffer", sys.stderr)
        for rank, proc in enumerate(self.procs):
            prefix = f"[{self.labels[rank]:>{width}}] ".encode()
            hide = hide_progress and rank != 0
            self.relays.append(Relay(rank, proc.stdout, stdout, prefix, self.console, hide, False))
            notice = self._pass_notice_on if self.labels[rank].startswith("ps") else None
            self.relays.append(Relay(rank, proc.stderr, stderr, prefix, self.console, hide, True, notice))
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

    def _pass_notice_on(self) -> None:
        """A parameter server got a preemption notice: SIGTERM to every worker, which save (the
        servers serve that save) and exit, as when the notice reaches a worker."""
        say("a parameter server got a preemption notice; passing it on to every worker (SIGTERM)")
        for label, proc in zip(self.labels, self.procs):
            if not label.startswith("ps") and proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
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
