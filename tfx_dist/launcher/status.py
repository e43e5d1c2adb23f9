"""How the launcher reports an outcome: its own messages on stderr and the exit statuses it returns."""

from __future__ import annotations

import signal
import sys

LAUNCHER = "tfx-dist-run"
EXIT_TIMEOUT = 124        # as coreutils' timeout(1)
EXIT_CANNOT_START = 2     # bad arguments (argparse's status) or the job could not start
# "Preempted, resumable" (EX_TEMPFAIL): a worker that saved after a preemption
# notice exits with it (tfx_dist.fault_tolerance.PREEMPTED_EXIT_CODE), and so
# does the launcher when it was told to stop and its workers did that.
EXIT_PREEMPTED = 75
# What a parameter server writes on stderr when it gets a preemption notice (SIGTERM):
# the launcher passes the notice on to every worker (tfx_dist.fault_tolerance.notice.NOTICE_LINE).
PREEMPTION_NOTICE_LINE = "tfx_dist: preemption notice:"


class LaunchError(RuntimeError):
    """The launcher could not start the job (bad arguments, no free ports)."""


def say(message: str) -> None:
    """Writes a message of the launcher's own to stderr, after its name: ``tfx-dist-run: ...``."""
    sys.stderr.write(f"{LAUNCHER}: {message}\n")
    sys.stderr.flush()


def describe_exit(code: int) -> str:
    """A worker's exit, as Popen.returncode gives it, in words: "failed with exit code 3"."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    if code == EXIT_PREEMPTED:
        return f"was preempted (exit code {code})"
    return f"failed with exit code {code}"


def shell_exit_code(code: int) -> int:
    """Popen.returncode as a shell reports it: 128+N for a process killed by signal N."""
    return 128 - code if code < 0 else code


def returncode_from_shell(code: int) -> int:
    """The reverse of `shell_exit_code`: -N for 128+N where N is a signal (a remote worker's exit)."""
    return 128 - code if 128 < code < 128 + signal.NSIG else code
