"""``--host-discovery-script``: which hosts are available and with how many slots (Horovod's contract),
and which of them is this host.

The script prints one ``host:slots`` line per available host (``host`` alone
means one slot); it is run again every ``EVERY_S`` seconds, and its last good
answer stands while a run fails. The elastic launcher keeps at most the slots
of each listed host busy: workers on this host start here, on the other hosts
through the remote shell (``remote_shell``). A listed host is this host when it
is ``localhost``, this machine's name, the launcher's ``--host``, or resolves
to an address of one of its interfaces; the loopback addresses other than
127.0.0.1 and ::1 count as other hosts (a way to try a remote shell on one
machine). A host the driver's address cannot be reached from (the launcher
listens on a loopback address, the host is not on it) is reported once and
left out.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import subprocess
import time
from typing import Dict, Optional

from tfx_dist.launcher.status import say

EVERY_S = 3.0
_RUN_S = 10.0
_LOOPBACK_OF_THIS_HOST = ("127.0.0.1", "::1")


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


def _addresses(host: str, kind: int = socket.SOCK_STREAM) -> list:
    try:
        return socket.getaddrinfo(host.strip("[]"), 9, type=kind)
    except (OSError, UnicodeError):
        return []


@functools.lru_cache(maxsize=None)
def is_this_host(host: str, listen_host: str) -> bool:
    """True when ``host`` names this machine (see the module's docstring)."""
    if host in ("localhost", listen_host, socket.gethostname(), socket.getfqdn()):
        return True
    for family, kind, _, _, address in _addresses(host):
        ip = ipaddress.ip_address(address[0].split("%")[0])
        if ip.is_loopback and str(ip) not in _LOOPBACK_OF_THIS_HOST:
            continue
        try:
            with socket.socket(family, kind) as probe:
                probe.bind((address[0], 0))  # binds only an address of this machine's interfaces
            return True
        except OSError:
            continue
    return False


@functools.lru_cache(maxsize=None)
def is_loopback(host: str) -> bool:
    addresses = _addresses(host)
    return bool(addresses) and all(ipaddress.ip_address(a[4][0].split("%")[0]).is_loopback
                                   for a in addresses)


def address_toward(host: str) -> Optional[str]:
    """This machine's address on the route to ``host`` (the interface toward it), or None."""
    for family, kind, _, _, address in _addresses(host, socket.SOCK_DGRAM):
        try:
            with socket.socket(family, kind) as probe:
                probe.connect(address)  # UDP: picks the route and the source address, sends nothing
                return probe.getsockname()[0]
        except OSError:
            continue
    return None


class HostDiscovery:
    """Runs the discovery script now and then; says which hosts offer how many slots."""

    def __init__(self, script: str):
        self.script = script
        self._hosts: Dict[str, int] = {}
        self._next = 0.0
        self._told_unreachable: set = set()

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

    def usable(self, listen_host: str) -> Dict[str, int]:
        """The listed hosts that can reach the driver at ``listen_host``, with their slots."""
        usable = {}
        for host, slots in self.hosts().items():
            if is_this_host(host, listen_host) or not is_loopback(listen_host) or is_loopback(host):
                usable[host] = slots
            elif host not in self._told_unreachable:
                self._told_unreachable.add(host)
                say(f"host discovery offers {host}, but the launcher listens on {listen_host} (--host), "
                    f"which {host} cannot reach: left out (give --host this host's address toward it)")
        return usable
