"""Connects the processes of a job and authenticates every connection.

Each rank listens on exactly the address the cluster gives it, connects to
every lower rank and accepts every higher one; every connection proves that
both ends know the job secret (``TFX_JOB_SECRET``) and gets its own wire keys;
the connected sockets are then handed to C++ as file descriptors.

One module per concern:

- ``connect``: :func:`connect_all` (a job's ranks), :func:`connect_service`
  (a request/response service), :func:`tell_rank_0` (a rank that failed
  before connecting); hands the sockets to C++.
- ``listener``: the server side (one thread runs every handshake; bounds slow
  ones; fails early only on what an outsider cannot forge).
- ``server_handshake``: one connection's server side, fed bytes as they arrive.
- ``client``: the client side (connects with retries, authenticates; the
  PROBE that checks a rank's secret at its own address).
- ``bind``: listening on this rank's cluster address only.
- ``wire``: the handshake's messages (their layout is described there).
- ``auth``: the HMAC proofs of the secret, the wire keys (HKDF), an elastic
  generation's key.
- ``shm_probe``: whether two ends share ``/dev/shm`` (same host).
- ``exceptions``: :class:`RendezvousError` and :class:`UnauthenticatedRendezvousError`.
"""

from __future__ import annotations

# The module, for the tests that patch ``rendezvous.socket.create_connection``.
import socket  # noqa: F401

from tfx_dist.comm.rendezvous.auth import generation_secret, wire_keys
from tfx_dist.comm.rendezvous.connect import Connections, connect_all, connect_service, tell_rank_0
from tfx_dist.comm.rendezvous.exceptions import RendezvousError, UnauthenticatedRendezvousError
from tfx_dist.comm.rendezvous.wire import ABORT, CONTROL, DATA, MAGIC, SERVICE, VERSION, cluster_digest

# Private names the tests reach for (a raw handshake, a listener driven by hand).
from tfx_dist.comm.rendezvous.client import _connect  # noqa: F401
from tfx_dist.comm.rendezvous.listener import _Listener  # noqa: F401
from tfx_dist.comm.rendezvous.wire import _HELLO, _MAC, _WELCOME, _extra  # noqa: F401

__all__ = ["ABORT", "CONTROL", "DATA", "MAGIC", "SERVICE", "VERSION", "Connections", "RendezvousError",
           "UnauthenticatedRendezvousError", "cluster_digest", "connect_all", "connect_service",
           "generation_secret",
           "tell_rank_0", "wire_keys"]
