"""Every process the launcher starts dies with the launcher, also when the launcher is killed by SIGKILL.

One way for every process (the workers of ``tfx-dist-run -n``, the workers and servers of an
elastic job, the remote shells and the processes they start on other hosts): the command
starts as a small Python shim that sets the parent-death signal (``PR_SET_PDEATHSIG``), binds
itself to its CPUs when asked, checks that its parent still lives, then executes the command;
the signal and the binding survive the exec. A shim rather than code between fork and exec
(``preexec_fn``): the launcher has threads (the output relays, the elastic driver), and a forked
child of a process with threads may run no Python. The signal comes when the *thread* that
started the process ends: start processes from the launcher's main thread, which lives as long
as the job. Linux only; elsewhere the command runs as given.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import List, Optional, Sequence

from tfx_dist.launcher.status import LaunchError

_SHIM = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(128 + signal.SIGKILL)  # the parent died before the signal was set\n"
    "if sys.argv[2]:\n"
    "    os.sched_setaffinity(0, [int(cpu) for cpu in sys.argv[2].split(',')])\n"
    "try:\n"
    "    os.execvp(sys.argv[3], sys.argv[3:])\n"
    "except OSError as e:\n"
    "    sys.exit(f'tfx-dist-run: could not start {sys.argv[3]!r}: {e}')\n")


def dying_with_parent(command: Sequence[str], cpus: Optional[Sequence[int]] = None) -> List[str]:
    """``command`` wrapped to die with this process (and to run on ``cpus`` when given)."""
    if not sys.platform.startswith("linux"):
        return list(command)
    cpu_list = ",".join(str(cpu) for cpu in cpus) if cpus else ""
    # -I -S: no user site, no PYTHON* variables, no site module: a fast start unaffected by
    # the worker's environment.
    return [sys.executable, "-I", "-S", "-c", _SHIM, str(os.getpid()), cpu_list, *command]


def check_startable(command: Sequence[str], env: dict) -> None:
    """Raises LaunchError when ``command[0]`` is no executable file (on ``env``'s PATH): the shim
    would find out only in the child, as a worker's failure."""
    if shutil.which(command[0], path=env.get("PATH", os.defpath)) is None:
        raise LaunchError(f"could not start {command[0]!r}: no executable file of that name")
