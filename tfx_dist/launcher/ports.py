"""Which ports the tasks listen on: ``--port-base`` checked, or free ports below the ephemeral range."""

from __future__ import annotations

import random
import socket
from typing import List, Optional

from tfx_dist.launcher.status import LaunchError


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))  # no SO_REUSEADDR: a port in TIME_WAIT counts as taken
        except OSError:
            return False
    return True


def _ephemeral_range() -> tuple:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def pick_ports(host: str, n: int, port_base: Optional[int] = None) -> List[int]:
    """Returns ``n`` distinct ports that are free on ``host``.

    With ``port_base``, the ports are ``port_base .. port_base+n-1``, and each
    must be free. Without, they are drawn at a random place in the ports
    *below* the kernel's ephemeral range (``ip_local_port_range``, usually
    32768-60999). Why: between this check and the worker's own bind() the port
    is unowned; a port from the ephemeral range could meanwhile be handed to
    any outgoing connection on the machine, while ports below it are only taken
    by explicit binds. A random start keeps two launchers on one machine apart.

    Raises:
      LaunchError: not enough free ports.
    """
    if port_base is not None:
        ports = list(range(port_base, port_base + n))
        if ports[0] < 1 or ports[-1] > 65535:
            raise LaunchError(f"--port-base {port_base} with -n {n} needs ports "
                              f"{ports[0]}..{ports[-1]}; ports must be in 1..65535")
        taken = [p for p in ports if not _port_is_free(host, p)]
        if taken:
            raise LaunchError(f"--port-base {port_base}: port(s) {taken} on {host} are in use; "
                              f"the job needs {ports[0]}..{ports[-1]} free")
        return ports
    low = 10000
    high = _ephemeral_range()[0] - 1
    if high - low < 4 * n:
        low, high = 1024, 65535
    span = high - low + 1
    start = random.randrange(span)
    ports: List[int] = []
    for i in range(span):
        port = low + (start + i) % span
        if _port_is_free(host, port):
            ports.append(port)
            if len(ports) == n:
                return ports
    raise LaunchError(f"found only {len(ports)} free ports on {host} in {low}..{high}, "
                      f"need {n}")
