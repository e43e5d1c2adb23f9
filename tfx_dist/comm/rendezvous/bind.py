"""Listening on this rank's cluster address: exactly that address, never all interfaces.

A bind that fails says why in the words of the job (a typo in the host list,
a process on the wrong host, a port in use), not just the OS error.
"""

from __future__ import annotations

import errno
import socket

from tfx_dist.cluster import split_address
from tfx_dist.comm.rendezvous.exceptions import RendezvousError


def _bind(rank: int, address: str) -> socket.socket:
    """A socket bound to this rank's cluster address, or an error that says why not."""
    host, port = split_address(address, "the cluster's address list")
    try:
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as e:
        raise RendezvousError(f"tfx_dist rank {rank}: cannot resolve {host!r}, the host of this "
                              f"rank's cluster address {address}: {e}. Check the host list "
                              f"(TF_CONFIG's `cluster`) for a typo.") from None
    sock = socket.socket(info[0], socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(info[4])
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRNOTAVAIL:
            resolved = "" if info[4][0] == host else f", which {host!r} resolves to"
            why = (f"this host does not own {info[4][0]}{resolved}. Each process "
                   f"listens on its own address in the cluster only: check that the host list "
                   f"(TF_CONFIG's `cluster`) has no typo and that this process runs on that host")
        elif e.errno == errno.EADDRINUSE:
            why = f"port {port} is in use on this host (another job, or a stale process?)"
        else:
            why = str(e)
        raise RendezvousError(f"tfx_dist rank {rank}: cannot listen on {address} (the address "
                              f"the cluster gives this rank): {why} ({e.strerror})") from None
    return sock
