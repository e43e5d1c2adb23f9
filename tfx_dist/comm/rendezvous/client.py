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
    _ACCEPTED, _CLUSTER_DIFFERS, _HELLO, _MAC, _MAX_ABORT_CHARS, _NONCE, _TRANSPORT_DIFFERS, _WELCOME,
    MAGIC, PROBE, VERSION, _cluster_mismatch, _extra, _load_extra, _recv_exact, _send, _transport_mismatch)


def _connect(rank: int, size: int, server: int, addresses: list[str], channel: int, secret: bytes,
             deadline: float, abort: str | None = None,
             transport: dict | None = None) -> tuple[socket.socket, bool, bytes]:
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
            return _client_handshake(sock, rank, size, server, addresses, channel, secret, deadline, abort,
                                     transport)
        except _Retry as e:  # the peer's listener was not ours yet (port reuse); try again
            last_error = e
            sock.close()
            time.sleep(0.05)
        except BaseException:
            sock.close()
            raise


class _Retry(Exception):
    pass


def _client_handshake(sock, rank, size, server, addresses, channel, secret, deadline, abort=None,
                      transport=None):
    if abort is not None:  # no shared memory to probe for a connection that only says why
        return _client_handshake_probed(sock, rank, size, server, addresses, channel, secret, deadline,
                                        {"cluster": list(addresses), "shm": "",
                                         "abort": abort[:_MAX_ABORT_CHARS]})
    probe = _ShmProbe()
    hello = {"cluster": list(addresses), "shm": probe.name}
    if transport:
        hello["transport"] = dict(transport)
    try:
        return _client_handshake_probed(sock, rank, size, server, addresses, channel, secret,
                                        deadline, hello)
    finally:
        probe.close()


def _client_handshake_probed(sock, rank, size, server, addresses, channel, secret, deadline, hello):
    address = addresses[server]
    who = f"rank {server} at {address}"
    nonce_c = secrets.token_bytes(_NONCE)
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
    try:  # the server may have dropped a slow handshake (a flood from this host): try again
        _send(sock, _mac(secret, b"client", transcript), deadline)
        verdict = _recv_exact(sock, 1, f"the handshake with {who}", deadline)
    except ConnectionError as e:
        raise _Retry(str(e)) from None
    if verdict == _TRANSPORT_DIFFERS:
        (n,) = struct.unpack("<H", _recv_exact(sock, 2, f"the handshake with {who}", deadline))
        theirs = _load_extra(_recv_exact(sock, n, f"the handshake with {who}", deadline))
        raise RendezvousError(_transport_mismatch(rank, server, f"at {address}", theirs.get("transport"),
                                                  hello.get("transport") or {})
                              or f"tfx_dist rank {rank}: {who} has different transport settings")
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


def probe_secret(rank: int, size: int, server: int, addresses: list[str], secret: bytes,
                 deadline: float) -> bool | None:
    """Does the process listening at rank ``server``'s address hold ``secret``?

    True or False from its WELCOME's MAC (a PROBE: no proof is sent, nothing
    is kept); None when nothing there answers as tfx_dist in time (not up yet).
    Only the process that holds that address can answer, so False is the
    peer's own secret, not an impostor's claim.
    """
    try:
        host, port = split_address(addresses[server], "the cluster's address list")
        sock = socket.create_connection((host, port), timeout=max(0.05, deadline - time.monotonic()))
    except (OSError, ValueError):
        return None
    with sock:
        nonce_c = secrets.token_bytes(_NONCE)
        extra_c = _extra({"cluster": list(addresses), "shm": ""})
        try:
            _send(sock, _HELLO.pack(MAGIC, VERSION, PROBE, rank, size, server, nonce_c, len(extra_c))
                  + extra_c, deadline)
            head = _recv_exact(sock, _WELCOME.size, "a probe", deadline)
            magic, version, nonce_s, mac_s, hlen = _WELCOME.unpack(head)
            if magic != MAGIC or version != VERSION:
                return None
            extra_s = _recv_exact(sock, hlen, "a probe", deadline)
        except (OSError, TimeoutError):
            return None
    transcript = _transcript(nonce_c, nonce_s, PROBE, rank, server, size, extra_c, extra_s)
    return hmac.compare_digest(mac_s, _mac(secret, b"server", transcript))
