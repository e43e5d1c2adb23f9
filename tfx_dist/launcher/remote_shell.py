"""How the elastic launcher starts a worker on another host: the remote shell's command line, and the
first line it sends on the shell's standard input (``remote_worker`` reads it there).

The remote shell is a command prefix that runs its last argument, a shell command line, on a
host: ``ssh -o BatchMode=yes HOST`` by default (Horovod's convention; ``--ssh-port``,
``--ssh-identity-file``), or ``--remote-shell``: ``{host}`` in it is replaced by the host, else
the host is appended (``ssh -p 2222``, ``ip netns exec {host} sh -c``). Nothing secret goes on a
command line: the job secret and the environment travel on standard input.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from typing import List, Optional, Sequence

# Variables of the launcher's own login session: the remote shell's session has its own.
_SESSION_VARIABLES = frozenset({"HOME", "USER", "LOGNAME", "SHELL", "MAIL", "HOSTNAME", "PWD", "OLDPWD",
                                "SHLVL", "_", "DISPLAY", "TERM"})
_SESSION_PREFIXES = ("SSH_", "XDG_", "BASH_FUNC_")


class RemoteShell:
    """The command prefix that runs a command line on another host."""

    def __init__(self, template: Optional[str] = None, ssh_port: Optional[int] = None,
                 ssh_identity_file: Optional[str] = None):
        if template:
            self.words = shlex.split(template)
        else:
            self.words = ["ssh", "-o", "BatchMode=yes"]
            self.words += ["-p", str(ssh_port)] if ssh_port else []
            self.words += ["-i", ssh_identity_file] if ssh_identity_file else []

    def argv(self, host: str, command_line: str) -> List[str]:
        """The local command that runs ``command_line`` on ``host``."""
        if any("{host}" in word for word in self.words):
            words = [word.replace("{host}", host) for word in self.words]
        else:
            words = self.words + [host]
        return words + [command_line]


def starter_command_line(environ: Optional[dict] = None) -> str:
    """What the remote shell runs on the host: ``remote_worker``, with this launcher's Python, in its
    working directory where the host has it (as Horovod's ``cd``), tfx_dist found where it is here."""
    environ = os.environ if environ is None else environ
    words = ["exec"]
    if environ.get("PYTHONPATH"):
        words += ["env", shlex.quote(f"PYTHONPATH={environ['PYTHONPATH']}")]
    words += [shlex.quote(sys.executable), "-m", "tfx_dist.launcher.remote_worker"]
    return f"cd {shlex.quote(os.getcwd())} 2>/dev/null; " + " ".join(words)


def forwarded_environment(env: dict) -> dict:
    """The worker's environment to send, less the variables of this launcher's login session."""
    return {name: value for name, value in env.items()
            if name not in _SESSION_VARIABLES and not name.startswith(_SESSION_PREFIXES)}


def first_line(name: str, host: str, driver: str, cluster: dict, env: dict,
               command: Sequence[str]) -> bytes:
    """The settings ``remote_worker`` reads on its standard input (one JSON line)."""
    settings = {"name": name, "host": host, "driver": driver, "cluster": cluster,
                "env": forwarded_environment(env), "cwd": os.getcwd(), "command": list(command)}
    return json.dumps(settings).encode() + b"\n"
