"""One process of an elastic job (a worker or a parameter server) and its two relays: started on this
host, or on another through the remote shell (``remote_shell``, ``remote_worker``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List, Optional, Sequence

from tfx_dist.launcher.console import Console
from tfx_dist.launcher.parent_death import check_startable, dying_with_parent
from tfx_dist.launcher.relay import Relay
from tfx_dist.launcher.status import LaunchError, returncode_from_shell


class JobProcess:
    """``argv`` started with ``env``; with ``first_line``, ``argv`` is a remote shell and its standard
    input the channel to ``remote_worker`` on the other host: ``first_line`` first, then signals."""

    def __init__(self, name: str, argv: Sequence[str], env: dict, console: Console, hide: bool,
                 first_line: Optional[bytes] = None, host: Optional[str] = None):
        self.name, self.host, self.remote = name, host, first_line is not None
        try:
            check_startable(argv, env)
            self.proc = subprocess.Popen(dying_with_parent(argv), env=env,
                                         stdin=subprocess.PIPE if self.remote else subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         start_new_session=True)
        except OSError as e:
            raise LaunchError(f"could not start {argv[0]!r}: {e}") from None
        if self.remote:
            self._tell(first_line)
        prefix = f"[{name}] ".encode()
        out = getattr(sys.stdout, "buffer", sys.stdout)
        err = getattr(sys.stderr, "buffer", sys.stderr)
        self.relays = [Relay(name, self.proc.stdout, out, prefix, console, hide, False),
                       Relay(name, self.proc.stderr, err, prefix, console, hide, True)]
        for relay in self.relays:
            relay.start()

    def returncode(self) -> Optional[int]:
        """Popen.returncode; for a remote worker, its 128+N read back as killed by signal N."""
        code = self.proc.poll()
        return returncode_from_shell(code) if self.remote and code is not None else code

    def _tell(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # the remote shell is gone: its exit tells

    def kill(self, sig: int) -> None:
        """``sig`` to the process group; to a remote worker through its channel (and SIGKILL also
        ends the channel and the remote shell: the remote side kills the worker at the end of its
        input)."""
        if self.proc.poll() is not None:
            return
        if self.remote:
            self._tell(b"KILL\n" if sig == signal.SIGKILL else b"TERM\n")
            if sig != signal.SIGKILL:
                return
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            os.killpg(self.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def tail(self) -> List[str]:
        self.relays[1].join(2.0)
        return list(self.relays[1].tail or ())
