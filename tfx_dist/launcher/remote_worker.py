"""The start of a worker on another host: what the remote shell runs there
(``python -m tfx_dist.launcher.remote_worker``).

The launcher (``remote_shell``) runs this module on host H through the remote
shell (``ssh -o BatchMode=yes H`` by default) and talks to it over the
shell's standard input, never its command line (``ps`` shows command lines
to every user of H):

- first line: a JSON object: the worker's ``name``, the ``host`` name it
  listens at, the ``driver``'s address, the ``cluster`` entries other than
  the worker's own (the parameter servers), the ``env`` to set (the job
  secret among it), the ``cwd`` and the ``command``;
- then ``TERM`` or ``KILL`` lines: the signal to send the worker (its
  process group);
- end of input: the launcher is gone (its remote shell died, or it closed
  the channel): the worker is killed, as a local worker dies with the
  launcher.

Here it picks a free port on H (the bind is checked on H itself), tells the
driver the worker's address (authenticated, ``address``), sets ``TF_CONFIG``
to it and starts the command. Its exit is the worker's: the same exit code,
or 128+N for a worker killed by signal N.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys

from tfx_dist.cluster import join_address, make_tf_config
from tfx_dist.launcher.elastic_protocol import ProtocolError, ask
from tfx_dist.launcher.parent_death import check_startable, dying_with_parent
from tfx_dist.launcher.ports import pick_ports
from tfx_dist.launcher.status import LAUNCHER, LaunchError, shell_exit_code

_ASK_S = 30.0
_POLL_S = 0.1


def _read_first_line() -> tuple:
    """The first line of standard input (the launcher's JSON) and what came after it."""
    data = b""
    while b"\n" not in data:
        chunk = os.read(0, 65536)
        if not chunk:
            raise LaunchError("the launcher closed the channel before it sent the worker's settings")
        data += chunk
    line, _, rest = data.partition(b"\n")
    return json.loads(line.decode()), rest


def start(settings: dict) -> subprocess.Popen:
    """Picks this worker's port, tells the driver its address, starts its command."""
    env = dict(os.environ)
    env.update(settings["env"])
    host, name = settings["host"], settings["name"]
    try:
        address = join_address(host, pick_ports(host, 1)[0])
    except (LaunchError, OSError) as e:  # also: ``host`` names no address of this machine
        raise LaunchError(f"worker {name} cannot listen at {host} on this host: {e}") from None
    try:
        answer = ask(settings["driver"], env["TFX_JOB_SECRET"].encode(),
                     {"op": "address", "worker": name, "address": address}, _ASK_S)
    except (ProtocolError, OSError) as e:
        raise LaunchError(f"could not tell the elastic driver worker {name}'s address: {e}") from None
    if "stop" in answer:
        raise LaunchError(f"the elastic driver stopped worker {name}: {answer['stop']}")
    env["TF_CONFIG"] = make_tf_config({"worker": [address], **settings["cluster"]}, "worker", 0)
    try:
        os.chdir(settings["cwd"])
    except OSError:
        pass  # no such directory on this host: the remote shell's own stays
    command = settings["command"]
    check_startable(command, env)
    return subprocess.Popen(dying_with_parent(command), env=env, stdin=subprocess.DEVNULL,
                            start_new_session=True)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def watch(proc: subprocess.Popen, pending: bytes) -> int:
    """Passes the launcher's signals on until the worker exits; its exit code."""
    while True:
        *lines, pending = pending.split(b"\n")
        for line in lines:
            if line.strip() in (b"TERM", b"KILL"):
                _signal(proc, signal.SIGTERM if line.strip() == b"TERM" else signal.SIGKILL)
        code = proc.poll()
        if code is not None:
            return code
        readable, _, _ = select.select([0], [], [], _POLL_S)
        if readable:
            chunk = os.read(0, 4096)
            if not chunk:  # the launcher is gone
                _signal(proc, signal.SIGKILL)
                return proc.wait()
            pending += chunk


def main() -> None:
    try:
        settings, rest = _read_first_line()
        proc = start(settings)
    except (LaunchError, ValueError, KeyError) as e:
        sys.exit(f"{LAUNCHER} (on {os.uname().nodename}): {e}")
    # A worker killed by signal N exits 128+N, as a shell reports it: ssh turns a remote death by a
    # signal into its own 255, an exit code it passes on (the launcher reads it back, JobProcess).
    sys.exit(shell_exit_code(watch(proc, rest)))


if __name__ == "__main__":
    main()
