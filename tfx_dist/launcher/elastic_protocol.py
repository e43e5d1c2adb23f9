"""The elastic driver's wire protocol: one authenticated request and its answer per connection.

Between a worker (``tfx_dist.elastic.driver_client``) and the driver that
``tfx-dist-run --elastic`` runs (``elastic_driver``)::

    driver -> worker  nonce (32 bytes)
    worker -> driver  u32 length + JSON request + HMAC-SHA256(secret, "request" | nonce | request)
    driver -> worker  u32 length + JSON answer + HMAC-SHA256(secret, "answer" | nonce | request | answer)

The driver's fresh nonce stops a replayed request, and the answer's MAC binds
it to this request on this connection: only a holder of the job secret can
ask the driver anything or tell a worker which generation it is in.
Standard library only (the launcher loads no TensorFlow).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import time

_NONCE = 32
_MAC = 32
_LENGTH = struct.Struct("<I")
MAX_MESSAGE = 1 << 20


class ProtocolError(ConnectionError):
    """The other end broke the protocol, failed authentication or did not answer in time."""


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def _recv_message(sock: socket.socket, deadline: float, what: str) -> tuple[bytes, bytes]:
    """Reads length, body and MAC; each read is bounded by what is left until ``deadline``."""
    reader = sock.makefile("rb")
    parts = []
    for size in (_LENGTH.size, None, _MAC):
        if size is None:
            (size,) = _LENGTH.unpack(parts.pop())
            if size > MAX_MESSAGE:
                raise ProtocolError(f"{what} of {size} bytes is over the {MAX_MESSAGE}-byte limit")
        parts.append(_read(sock, reader, size, deadline, what))
    return parts[0], parts[1]


def _read(sock: socket.socket, reader, size: int, deadline: float, what: str) -> bytes:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    try:
        data = reader.read(size)
    except (socket.timeout, TimeoutError):
        raise ProtocolError(f"timed out waiting for {what}") from None
    if len(data) < size:
        raise ProtocolError(f"connection closed while waiting for {what}")
    return data


def _send(sock: socket.socket, data: bytes, deadline: float) -> None:
    sock.settimeout(max(0.001, deadline - time.monotonic()))
    sock.sendall(data)


def ask(address: str, secret: bytes, request: dict, timeout_s: float) -> dict:
    """Sends ``request`` to the driver at ``address`` (``host:port``); returns its answer.

    Raises:
      ProtocolError: no answer within ``timeout_s``, or one that does not
        prove the job secret.
    """
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout_s, 10.0))
    except OSError as e:
        raise ProtocolError(f"cannot reach the elastic driver at {address}: {e}") from None
    with sock:
        nonce = _read(sock, sock.makefile("rb"), _NONCE, deadline, "the elastic driver's greeting")
        body = json.dumps(request, separators=(",", ":")).encode()
        _send(sock, _LENGTH.pack(len(body)) + body + _mac(secret, b"request", nonce, body), deadline)
        answer, mac = _recv_message(sock, deadline, "the elastic driver's answer")
    if not hmac.compare_digest(mac, _mac(secret, b"answer", nonce, body, answer)):
        raise ProtocolError(f"the answer from {address} does not prove the job secret "
                            "(another job's driver at that address?)")
    return json.loads(answer.decode())


def serve_one(sock: socket.socket, secret: bytes, handle, timeout_s: float) -> None:
    """The driver's side of one connection: reads an authenticated request, answers ``handle(request)``.

    A request whose MAC does not verify gets no answer (the connection is closed).
    """
    deadline = time.monotonic() + timeout_s
    nonce = os.urandom(_NONCE)
    _send(sock, nonce, deadline)
    body, mac = _recv_message(sock, deadline, "a worker's request")
    if not hmac.compare_digest(mac, _mac(secret, b"request", nonce, body)):
        raise ProtocolError("a request that does not prove the job secret")
    answer = json.dumps(handle(json.loads(body.decode())), separators=(",", ":")).encode()
    _send(sock, _LENGTH.pack(len(answer)) + answer + _mac(secret, b"answer", nonce, body, answer),
          time.monotonic() + timeout_s)
