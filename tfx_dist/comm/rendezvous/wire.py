"""The handshake's messages: their layout, their JSON extras, and reading and writing them in time.

Handshake (client = the connecting, higher rank; all integers little-endian)::

    client -> server  HELLO   magic "TFXCOMM\\x01", version u16, channel u8,
                              client rank u32, size u32, server rank u32,
                              client nonce (32 bytes), extra (u16 length + JSON:
                              {"cluster": [address, ...], "shm": probe name,
                              "transport": {setting: value}})
    server -> client  WELCOME magic, version u16, server nonce (32),
                              HMAC-SHA256(secret, "server" | transcript), extra
                              (u16 length + JSON: {"cluster": sha256 hex,
                              "shm": true if it could open the probe,
                              "transport": {setting: value}})
    client -> server  PROOF   HMAC-SHA256(secret, "client" | transcript)
    server -> client  VERDICT 1 byte: 1 accepted, 0 rejected, 2 the clusters
                              differ (then u16 length + the server's cluster
                              as JSON, so that both sides can name both views),
                              3 the transport settings differ (then u16 length
                              + the server's settings as JSON)

where transcript = client nonce | server nonce | channel | client rank |
server rank | size | SHA-256 of both extras. Both sides prove they know the
job secret without sending it, and fresh nonces on both sides stop replays.
Bytes that do not start with the magic are reported as garbage and the
connection is dropped; the listener keeps waiting for the real peers.

A rank that fails before it can connect (its own address does not resolve
or cannot be bound, or its script raised before its rendezvous finished:
``early_failure``) tells rank 0, best effort: the same handshake on channel
ABORT, with {"abort": its error} in HELLO's extra (so the error is bound into
both MACs: only a peer with the secret can stop the job this way). Rank 0
then fails at once naming that rank and its error, rather than after
TFX_TIMEOUT_S.

The transport settings that both ends of a connection must share
(``TFX_WIRE_PROTECTION``, ``TFX_SHM``: otherwise one end reads frames the
other did not write that way, which looks like tampering) travel in both
extras too; the server compares them after authentication and a difference
fails both ranks at once, naming both ranks and both values.

A PROBE (channel 5) checks whether the process listening at a rank's
address holds this job's secret: the prober sends HELLO, verifies WELCOME's
MAC and hangs up (``client.probe_secret``); see ``listener`` for why.

The clusters must agree: each side compares the other's list of addresses
with its own, after authentication, and a mismatch fails both ranks at once
with both lists (rather than a hang, or a wrong job formed from two).
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import time

MAGIC = b"TFXCOMM\x01"
VERSION = 2
DATA, CONTROL = 1, 2
SERVICE = 3  # a request/response service connection (connect_service)
ABORT = 4    # a rank that failed before connecting tells rank 0 why (connect_all), then hangs up
PROBE = 5    # does the process at a rank's address hold our secret? (WELCOME's MAC says; no proof)
_NONCE = 32
_MAC = 32
# magic, version, channel, client rank, size, server rank, nonce, extra length
_HELLO = struct.Struct("<8sHBIII32sH")
_WELCOME = struct.Struct("<8sH32s32sH")     # magic, version, nonce, mac, extra len
_ACCEPTED, _REJECTED, _CLUSTER_DIFFERS, _TRANSPORT_DIFFERS = b"\x01", b"\x00", b"\x02", b"\x03"
# The longest error an ABORT carries.
_MAX_ABORT_CHARS = 2000


def cluster_digest(addresses: list[str]) -> str:
    """SHA-256 (hex) of the cluster as this rank sees it: every rank's address, in rank order."""
    return hashlib.sha256(json.dumps(list(addresses)).encode()).hexdigest()


def _extra(value: dict) -> bytes:
    data = json.dumps(value, separators=(",", ":")).encode()
    if len(data) > 0xFFFF:   # a cluster of thousands: send its digest only
        value = dict(value, cluster=cluster_digest(value["cluster"]))
        data = json.dumps(value, separators=(",", ":")).encode()
    return data


def _load_extra(data: bytes) -> dict:
    try:
        value = json.loads(data.decode("utf-8"))
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _same_cluster(theirs: object, mine: list[str]) -> bool:
    if isinstance(theirs, str):   # a digest
        return theirs == cluster_digest(mine)
    return isinstance(theirs, list) and theirs == list(mine)


def _cluster_mismatch(rank: int, peer: int, where: str, theirs: object, mine: list[str]) -> str:
    shown = theirs if isinstance(theirs, list) else f"(digest {theirs})"
    return (f"tfx_dist rank {rank}: rank {peer} ({where}) was started with a different cluster. "
            f"Rank {peer} sees workers {shown}; rank {rank} sees workers {list(mine)}. Every "
            f"process of the job needs the same cluster (TF_CONFIG's `cluster`, in the same order).")


def _transport_mismatch(rank: int, peer: int, where: str, theirs: object, mine: dict) -> str | None:
    """None if the settings agree (or a side sent none: an ABORT, a PROBE); else both ranks' values."""
    if not isinstance(theirs, dict) or not mine or theirs == mine:
        return None
    differ = sorted(k for k in set(theirs) | set(mine) if theirs.get(k) != mine.get(k))
    shown = "; ".join(f"{k}: rank {peer} has {theirs.get(k)!r}, rank {rank} has {mine.get(k)!r}"
                      for k in differ)
    return (f"tfx_dist rank {rank}: rank {peer} ({where}) was started with different transport "
            f"settings ({shown}). Both ends of every connection must agree: set "
            f"{' and '.join(differ)} the same in every process of the job.")


def _recv_exact(sock: socket.socket, n: int, what: str, deadline: float) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"timed out during {what}")
        sock.settimeout(left)
        try:
            chunk = sock.recv(n - len(buf))
        except socket.timeout:
            raise TimeoutError(f"timed out during {what}") from None
        if not chunk:
            raise ConnectionError(f"connection closed during {what}")
        buf += chunk
    return bytes(buf)


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(data)
