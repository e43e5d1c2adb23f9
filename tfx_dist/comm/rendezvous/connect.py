"""Connecting a job or a service, and handing the connected sockets to C++ as file descriptors.

Each rank listens on exactly the address the cluster gives it (never on all
interfaces), connects to every lower rank, and accepts connections from every
higher rank: one *data* connection per pair of ranks, plus one *control*
connection from every rank to rank 0 (the negotiation coordinator). The
connected sockets are then handed to the C++ communicator (``socket.detach``),
with their wire keys.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import time

from tfx_dist.comm.rendezvous.client import _connect
from tfx_dist.comm.rendezvous.exceptions import RendezvousError, UnauthenticatedRendezvousError
from tfx_dist.comm.rendezvous.listener import _Listener
from tfx_dist.comm.rendezvous.wire import ABORT, CONTROL, DATA, SERVICE

_log = logging.getLogger("tfx_dist.comm")

# How long a failing rank tries to tell rank 0.
_ABORT_TRY_S = 5.0
# How long a rank that found another secret at a peer keeps its listener open,
# so that the peer's PROBE (listener.py) confirms it there too.
_LINGER_S = 3.0


@dataclasses.dataclass
class Connections:
    """Connected, authenticated sockets, as file descriptors owned by the caller."""

    data_fds: list[int]   # [size]; -1 at this rank
    ctrl_fds: list[int]   # rank 0: [size] (one per other rank); others: [0] = rank 0
    same_host: list[bool]
    # [size]: the data connection's wire keys (this rank's send key + receive key; b"" at this rank)
    data_keys: list[bytes] = dataclasses.field(default_factory=list)
    # [size]: the control connection's, laid out the same (rank 0: every other rank; others: [0])
    ctrl_keys: list[bytes] = dataclasses.field(default_factory=list)


def tell_rank_0(rank: int, size: int, addresses: list[str], secret: bytes, error: str,
                timeout_s: float) -> bool:
    """Best effort: rank 0 learns that this rank failed before connecting, and why."""
    try:
        sock = _connect(rank, size, 0, addresses, ABORT, secret,
                        time.monotonic() + min(_ABORT_TRY_S, timeout_s), abort=error)[0]
        sock.close()
        return True
    except Exception as e:  # noqa: BLE001 - the rank's own error is what gets raised
        _log.debug("tfx_dist rank %d: could not tell rank 0 that it failed: %s", rank, e)
        return False


def connect_all(rank: int, size: int, addresses: list[str], secret: bytes,
                timeout_s: float, transport: dict | None = None) -> Connections:
    """Connects this rank to every other one; returns the connections' fds.

    ``transport``: the settings both ends of a connection must share
    (``{"TFX_WIRE_PROTECTION": ..., "TFX_SHM": ...}``), compared in the handshake.
    """
    deadline = time.monotonic() + timeout_s
    try:
        listener = _Listener(rank, size, addresses, secret, deadline, transport=transport)
    except RendezvousError as e:  # this rank cannot take part: rank 0 need not wait for it
        if rank > 0:
            tell_rank_0(rank, size, addresses, secret, str(e), timeout_s)
        raise
    socks: list[socket.socket] = []
    try:
        data: dict[int, tuple[socket.socket, bool, bytes]] = {}
        ctrl: dict[int, tuple[socket.socket, bool, bytes]] = {}
        try:
            for server in range(rank):
                data[server] = _connect(rank, size, server, addresses, DATA, secret, deadline,
                                        transport=transport)
                socks.append(data[server][0])
            if rank > 0:
                ctrl[0] = _connect(rank, size, 0, addresses, CONTROL, secret, deadline, transport=transport)
                socks.append(ctrl[0][0])
        except UnauthenticatedRendezvousError:
            listener.linger(_LINGER_S)
            raise
        for (channel, peer), conn in listener.wait().items():
            (data if channel == DATA else ctrl)[peer] = conn
            socks.append(conn[0])
    except BaseException:
        for s in socks:
            s.close()
        raise
    finally:
        listener.close()
    data_fds, ctrl_fds, same_host, keys = [-1] * size, [-1] * size, [False] * size, [b""] * size
    for peer, (sock, shares_shm, peer_keys) in data.items():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        same_host[peer] = shares_shm
        keys[peer] = peer_keys
        data_fds[peer] = sock.detach()
    ctrl_keys = [b""] * size
    for peer, (sock, _, peer_keys) in ctrl.items():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctrl_keys[peer] = peer_keys
        ctrl_fds[peer] = sock.detach()
    return Connections(data_fds, ctrl_fds, same_host, keys, ctrl_keys)


def connect_service(role: str, index: int, server_addresses: list[str], num_clients: int, secret: bytes,
                    timeout_s: float, transport: dict | None = None
                    ) -> tuple[list[int], list[bool], list[bytes]]:
    """Connects a bipartite request/response service: every client to every server.

    A server (``role="server"``) listens on ``server_addresses[index]`` only and
    accepts clients ``0 .. num_clients-1``; a client (``role="client"``)
    connects to every server. Each connection is authenticated with the
    handshake above on channel ``SERVICE`` (client index as the client rank,
    server index as the server rank, ``num_clients`` as the size), so it
    cannot be taken for a collective connection. Returns (fds, same_host,
    wire keys: this end's send key + receive key, 64 bytes), one entry per
    peer (clients for a server, servers for a client); the fds are the caller's.
    """
    if role not in ("server", "client"):
        raise ValueError(f"Expected role 'server' or 'client'. Received: role={role!r}")
    deadline = time.monotonic() + timeout_s
    if role == "server":
        listener = _Listener(index, num_clients, server_addresses, secret, deadline,
                             expected={(SERVICE, c) for c in range(num_clients)}, transport=transport)
        try:
            accepted = listener.wait()
        finally:
            listener.close()
        conns = [accepted[(SERVICE, c)] for c in range(num_clients)]
    else:
        conns = []
        try:
            for server, address in enumerate(server_addresses):
                try:
                    conns.append(_connect(index, num_clients, server, server_addresses, SERVICE, secret,
                                          deadline, transport=transport))
                except RendezvousError as e:  # its "rank" words are the collective's: say who is who
                    # The same class: an authentication failure stays one.
                    raise type(e)(f"tfx_dist service client {index}, connecting to server {server} "
                                  f"at {address}: {e}") from None
        except BaseException:
            for sock, _, _ in conns:
                sock.close()
            raise
    fds, same_host, keys = [], [], []
    for sock, same, peer_keys in conns:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        same_host.append(same)
        keys.append(peer_keys)
        fds.append(sock.detach())
    return fds, same_host, keys
