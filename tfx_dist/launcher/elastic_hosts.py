"""``--host-discovery-script``: which hosts are available and with how many slots (Horovod's contract).

The script prints one ``host:slots`` line per available host (``host`` alone
means one slot); it is run again every ``EVERY_S`` seconds, and its last good
answer stands while a run fails. This launcher starts workers on its own host
only: slots of the host given by ``--host`` (or ``localhost``, ``127.0.0.1``,
this machine's name) count, other hosts are reported once and left out
(starting workers on other hosts needs a remote starter, e.g. one launcher per
host, which tfx-dist-run does not do yet).
"""

from __future__ import annotations

import socket
import subprocess
import time
from typing import Dict

from tfx_dist.launcher.status import say

EVERY_S = 3.0
_RUN_S = 10.0


def parse_hosts(text: str) -> Dict[str, int]:
    """``{host: slots}`` from the script's output; raises ValueError on a malformed line."""
    hosts: Dict[str, int] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        host, sep, slots = line.rpartition(":")
        if not sep:
            host, slots = line, "1"
        if not host or not slots.isdigit():
            raise ValueError(f"expected 'host:slots', got {line!r}")
        hosts[host] = hosts.get(host, 0) + int(slots)
    return hosts


class HostDiscovery:
    """Runs the discovery script now and then; says how many slots this host offers."""

    def __init__(self, script: str, host: str):
        self.script = script
        self.local_names = {host, "localhost", "127.0.0.1", socket.gethostname(), socket.getfqdn()}
        self._hosts: Dict[str, int] = {}
        self._next = 0.0
        self._told_remote: set = set()

    def hosts(self) -> Dict[str, int]:
        if time.monotonic() >= self._next:
            self._next = time.monotonic() + EVERY_S
            try:
                out = subprocess.run(self.script, shell=True, capture_output=True, text=True,
                                     timeout=_RUN_S, check=True).stdout
                self._hosts = parse_hosts(out)
            except (subprocess.SubprocessError, OSError, ValueError) as e:
                say(f"--host-discovery-script failed ({e}); keeping its last answer")
        return self._hosts

    def local_slots(self) -> int:
        hosts = self.hosts()
        for host in hosts:
            if host not in self.local_names and host not in self._told_remote:
                self._told_remote.add(host)
                say(f"host discovery offers {host}, not this host: left out (tfx-dist-run starts "
                    "workers on its own host only)")
        return sum(slots for host, slots in hosts.items() if host in self.local_names)
