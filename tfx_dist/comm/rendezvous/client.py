"""The client side of the rendezvous: connects to a peer, retrying until it answers, and authenticates.

A peer that is not listening yet is retried until the deadline; a port that
answers with a closed connection (the peer's listener was not ours yet: port
reuse) is retried too. Everything else that goes wrong fails at once, naming
the peer.
"""

from __future__ import annotations

import hmac
import secrets
import socket
import struct
import time

from tfx_dist.cluster import split_address
from tfx_dist.comm.rendezvous.auth import _mac, _transcript, wire_keys
from tfx_dist.comm.rendezvous.exceptions import RendezvousError, UnauthenticatedRendezvousError
from tfx_dist.comm.rendezvous.shm_probe import _ShmProbe
from tfx_dist.comm.rendezvous.wire import (
    _ACCEPTED, _CLUSTER_DIFFERS, _HELLO, _MAC, _MAX_ABORT_CHARS, _NONCE, _WELCOME, MAGIC, VERSION,
    _cluster_mismatch, _extra, _load_extra, _recv_exact, _send)


def _connect(rank: int, size: int, server: int, addresses: list[str], channel: int, secret: bytes,
             deadline: float, abort: str | None = None) -> tuple[socket.socket, bool]:
    address = addresses[server]
    host, port = split_address(address, "the cluster's address list")
    last_error = None
    while True:
        if time.monotonic() > deadline:
            raise RendezvousError(f"tfx_dist rank {rank}: timed out connecting to rank {server} at "
                                  f"{address}: {last_error}. Is that process running with the same "
                                  f"cluster? Raise TFX_TIMEOUT_S if it is only slow to start.")
        try:
            sock = socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic()))
        except OSError as e:
            last_error = e
            time.sleep(0.05)
            continue
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return _client_handshake(sock, rank, size, server, addresses, channel, secret, deadline, abort)
        except _Retry as e:  # the peer's listener was not ours yet (port reuse); try again
            last_error = e
            sock.close()
            time.sleep(0.05)
        except BaseException:
            sock.close()
            raise


class _Retry(Exception):
    pass


def _client_handshake(sock, rank, size, server, addresses, channel, secret, deadline, abort=None):
    if abort is not None:  # no shared memory to probe for a connection that only says why
        return _client_handshake_probed(sock, rank, size, server, addresses, channel, secret, deadline,
                                        "", abort)
    probe = _ShmProbe()
    try:
        return _client_handshake_probed(sock, rank, size, server, addresses, channel, secret,
                                        deadline, probe.name)
    finally:
        probe.close()


def _client_handshake_probed(sock, rank, size, server, addresses, channel, secret, deadline, probe,
                             abort=None):
    address = addresses[server]
    who = f"rank {server} at {address}"
    nonce_c = secrets.token_bytes(_NONCE)
    hello = {"cluster": list(addresses), "shm": probe}
    if abort is not None:
        hello["abort"] = abort[:_MAX_ABORT_CHARS]
    extra_c = _extra(hello)
    try:
        _send(sock, _HELLO.pack(MAGIC, VERSION, channel, rank, size, server, nonce_c, len(extra_c))
              + extra_c, deadline)
        head = _recv_exact(sock, _WELCOME.size, f"the handshake with {who}", deadline)
    except ConnectionError as e:
        raise _Retry(str(e)) from None
    except TimeoutError as e:
        raise RendezvousError(f"tfx_dist rank {rank}: {e} (connected to {address}, but no tfx_dist "
                              f"answer: is {who} stuck, or another program on that port?)") from None
    magic, version, nonce_s, mac_s, hlen = _WELCOME.unpack(head)
    if magic != MAGIC:
        raise RendezvousError(f"tfx_dist rank {rank}: {who} answered with bytes that are not a "
                              f"tfx_dist handshake ({head[:8]!r}...): is another program on that port?")
    if version != VERSION:
        raise RendezvousError(f"tfx_dist rank {rank}: {who} speaks protocol version {version}, "
                              f"expected {VERSION}")
    extra_s = _recv_exact(sock, hlen, f"the handshake with {who}", deadline)
    transcript = _transcript(nonce_c, nonce_s, channel, rank, server, size, extra_c, extra_s)
    if not hmac.compare_digest(mac_s, _mac(secret, b"server", transcript)):
        try:  # a proof that cannot verify, so that the server reports the mismatch too
            _send(sock, bytes(_MAC), deadline)
        except OSError:
            pass
        raise UnauthenticatedRendezvousError(
            f"tfx_dist rank {rank}: {who} failed authentication: its job secret differs from this "
            f"rank's (TFX_JOB_SECRET must be the same in every process of the job)")
    _send(sock, _mac(secret, b"client", transcript), deadline)
    verdict = _recv_exact(sock, 1, f"the handshake with {who}", deadline)
    if verdict == _CLUSTER_DIFFERS:
        (n,) = struct.unpack("<H", _recv_exact(sock, 2, f"the handshake with {who}", deadline))
        theirs = _load_extra(_recv_exact(sock, n, f"the handshake with {who}", deadline))
        raise RendezvousError(_cluster_mismatch(rank, server, f"at {address}",
                                                theirs.get("cluster"), addresses))
    if verdict != _ACCEPTED:
        raise UnauthenticatedRendezvousError(f"tfx_dist rank {rank}: {who} rejected this rank's "
                                             f"authentication (TFX_JOB_SECRET differs)")
    sock.settimeout(None)
    to_server, to_client = wire_keys(secret, nonce_c, nonce_s, transcript)
    return sock, _load_extra(extra_s).get("shm") is True, to_server + to_client
