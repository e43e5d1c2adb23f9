"""Authentication and key derivation: the HMAC proofs of the job secret, and the wire keys.

Each side proves it knows the job secret by an HMAC-SHA256 of the transcript
(both nonces, the channel, both ranks, the size and both extras) under its own
role, without sending the secret; fresh nonces on both sides stop replays.

After the handshake both sides derive the connection's two wire keys
(:func:`wire_keys`: HKDF-SHA256 of the secret, both nonces and the
transcript; one key per direction) and hand them to C++ with the fd: the
data, control and service connections then carry AES-256-GCM frames
(``TFX_WIRE_PROTECTION``, ``core/transport/frame_protection.h``), so a relay
that passed the handshake through still cannot change, drop, reorder or
replay what follows.

Why Python's hmac here rather than OpenSSL in the C++ library: TensorFlow's
``libtensorflow_framework.so`` exports BoringSSL's symbols (HMAC, EVP_*) under
OpenSSL's names, so a dynamically linked libcrypto risks binding to them
inside the process (libtfx_comm therefore links libcrypto statically, with
its symbols kept inside, for the frames only); the standard library's
hmac/secrets are well maintained and the handshake is not performance
critical.
"""

from __future__ import annotations

import hashlib
import hmac
import struct


def _transcript(nonce_c: bytes, nonce_s: bytes, channel: int, crank: int, srank: int, size: int,
                extra_c: bytes = b"", extra_s: bytes = b"") -> bytes:
    return (nonce_c + nonce_s + struct.pack("<BIII", channel, crank, srank, size)
            + hashlib.sha256(extra_c).digest() + hashlib.sha256(extra_s).digest())


def _mac(secret: bytes, role: bytes, transcript: bytes) -> bytes:
    return hmac.new(secret, role + transcript, hashlib.sha256).digest()


def wire_keys(secret: bytes, nonce_c: bytes, nonce_s: bytes, transcript: bytes) -> tuple[bytes, bytes]:
    """The connection's two AES-256 keys (client to server, server to client), by HKDF-SHA256.

    RFC 5869 with the stdlib's HMAC: extract with both nonces as salt, expand
    one block per direction with the transcript as context. Fresh nonces give
    every connection its own keys, so frames of one cannot be replayed on another.
    """
    prk = hmac.new(nonce_c + nonce_s, secret, hashlib.sha256).digest()

    def expand(label: bytes) -> bytes:
        return hmac.new(prk, b"tfx_dist wire v1 " + label + transcript + b"\x01", hashlib.sha256).digest()

    return expand(b"client->server"), expand(b"server->client")


def generation_secret(secret: bytes, generation: int) -> bytes:
    """The key the connections of an elastic job's ``generation`` (> 0) prove instead of the secret.

    Every HMAC of the handshake is then bound to the generation: a process
    still at another generation fails authentication with this one's ranks
    (refused like any peer without the key) and cannot join or confuse it.
    """
    return hmac.new(secret, b"tfx_dist membership generation %d" % int(generation), hashlib.sha256).digest()
