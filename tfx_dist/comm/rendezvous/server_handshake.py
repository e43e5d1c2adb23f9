"""One connection's server side of the handshake, fed bytes as they arrive (never blocking).

The listener's selector calls :meth:`Handshake.on_readable`; the handshake
reads what is there and, once HELLO (fixed part, then extra) and PROOF are
complete, answers (WELCOME, VERDICT: a few hundred bytes, which a fresh
socket's buffer takes at once) and returns its :class:`Outcome`. The
messages are those of ``wire``; the checks are in the order that reveals
nothing to a peer that has not proved the secret.
"""

from __future__ import annotations

import dataclasses
import hmac
import secrets
import socket
import struct

from tfx_dist.comm.rendezvous.auth import _mac, _transcript, wire_keys
from tfx_dist.comm.rendezvous.shm_probe import _can_open_probe
from tfx_dist.comm.rendezvous.wire import (
    _ACCEPTED, _CLUSTER_DIFFERS, _HELLO, _MAC, _MAX_ABORT_CHARS, _NONCE, _REJECTED, _TRANSPORT_DIFFERS,
    _WELCOME, ABORT, CONTROL, MAGIC, PROBE, VERSION, _cluster_mismatch, _extra, _load_extra,
    _same_cluster, _transport_mismatch, cluster_digest)


@dataclasses.dataclass
class Outcome:
    accepted: tuple | None = None    # (socket, same host, wire keys) of a connection to keep
    rejected: str | None = None      # why it was dropped (None: dropped without a report)
    fatal: str | None = None         # authenticated: the job cannot form
    auth_failed: int | None = None   # the rank a failed proof claimed (the listener decides)
    probed: bool = False             # a peer's PROBE was answered


class Handshake:
    def __init__(self, listener, sock: socket.socket, peer_addr, started: float):
        self.listener, self.sock, self.started = listener, sock, started
        self.source = str(peer_addr[0])
        self.where = f"{peer_addr[0]}:{peer_addr[1]}"
        self.buf = bytearray()
        self.need = _HELLO.size
        self.stage = self._on_head
        self.channel = self.crank = -1

    def idle(self) -> bool:
        """No HELLO yet (what a flood of idle connections looks like)."""
        return self.stage == self._on_head and len(self.buf) < self.need

    def on_readable(self) -> Outcome | None:
        try:
            chunk = self.sock.recv(max(1, self.need - len(self.buf)))
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            return Outcome(rejected=f"handshake with {self.where} failed: {e}")
        if not chunk:
            if self.stage == self._on_proof and self.channel == PROBE:
                return Outcome(probed=True)  # a probe hangs up after WELCOME: nothing to report
            return Outcome(rejected=f"handshake with {self.where} failed: connection closed during "
                                    f"the handshake")
        self.buf += chunk
        while len(self.buf) >= self.need:
            data, self.buf = bytes(self.buf[:self.need]), self.buf[self.need:]
            try:
                outcome = self.stage(data)
            except (OSError, struct.error) as e:
                return Outcome(rejected=f"handshake with {self.where} failed: {e}")
            if outcome is not None:
                return outcome
        return None

    def _send(self, data: bytes) -> None:
        self.sock.settimeout(1.0)  # a few hundred bytes into a fresh socket's buffer
        try:
            self.sock.sendall(data)
        finally:
            self.sock.setblocking(False)

    # --- the stages --------------------------------------------------------------------------
    def _on_head(self, head: bytes) -> Outcome | None:
        lst = self.listener
        magic, version, self.channel, self.crank, self.size, self.srank, self.nonce_c, hlen = \
            _HELLO.unpack(head)
        if magic != MAGIC:
            return Outcome(rejected=f"connection from {self.where} sent bytes that are not a tfx_dist "
                                    f"handshake (garbage {head[:8]!r}...)")
        if version != VERSION:
            return Outcome(rejected=f"connection from {self.where} speaks protocol version {version}, "
                                    f"expected {VERSION} (mixed tfx_dist versions?)")
        with lst.lock:
            replayed = self.nonce_c in lst.client_nonces
            lst.client_nonces.add(self.nonce_c)
        if replayed:  # a real client draws a fresh 32-byte nonce every time
            return Outcome(rejected=f"connection from {self.where} replayed an earlier handshake (its "
                                    f"nonce was already used): refused; not a peer of this job, or a relay")
        self.stage, self.need = self._on_extra, hlen
        return self._on_extra(b"") if hlen == 0 else None

    def _on_extra(self, extra_c: bytes) -> Outcome | None:
        lst = self.listener
        channel, crank = self.channel, self.crank
        hello = _load_extra(extra_c)
        self.mismatch = self.transport_differs = None
        if not _same_cluster(hello.get("cluster"), lst.addresses):
            if channel == PROBE:
                return Outcome(rejected=f"a probe from {self.where} names another cluster")
            self.mismatch = _cluster_mismatch(lst.rank, crank, f"connecting from {self.where}",
                                              hello.get("cluster"), lst.addresses)
        elif self.size != lst.size or self.srank != lst.rank or not self._expected(channel, crank):
            return Outcome(rejected=f"connection from {self.where} claims rank {crank} of {self.size} "
                                    f"(channel {channel}) for rank {self.srank}; this is rank {lst.rank} "
                                    f"of {lst.size} and does not expect it")
        else:
            self.transport_differs = _transport_mismatch(lst.rank, crank, f"connecting from {self.where}",
                                                         hello.get("transport"), lst.transport)
        self.hello = hello
        nonce_s = secrets.token_bytes(_NONCE)
        self.same_host = _can_open_probe(hello.get("shm"))
        extra_s = _extra({"cluster": cluster_digest(lst.addresses), "shm": self.same_host,
                          "transport": lst.transport})
        # The client's claims: equal to this rank's own unless the clusters differ.
        self.transcript = _transcript(self.nonce_c, nonce_s, channel, crank, self.srank, self.size,
                                      extra_c, extra_s)
        self.nonce_s = nonce_s
        self._send(_WELCOME.pack(MAGIC, VERSION, nonce_s, _mac(lst.secret, b"server", self.transcript),
                                 len(extra_s)) + extra_s)
        self.stage, self.need = self._on_proof, _MAC
        return None

    def _expected(self, channel: int, crank: int) -> bool:
        lst = self.listener
        if channel == PROBE:
            return 0 <= crank < lst.size and crank != lst.rank
        return (channel, crank) in lst.expected or (channel == ABORT and (CONTROL, crank) in lst.expected)

    def _on_proof(self, proof: bytes) -> Outcome:
        lst = self.listener
        crank, where = self.crank, self.where
        if self.channel == PROBE:  # the prober has what it came for (WELCOME's MAC)
            return Outcome(probed=True)
        if not hmac.compare_digest(proof, _mac(lst.secret, b"client", self.transcript)):
            self._send(_REJECTED)
            why = (f"a connection from {where} claiming rank {crank} failed authentication (its job secret "
                   f"differs from this rank's TFX_JOB_SECRET, or it is not a process of this job)")
            return Outcome(rejected=why, auth_failed=None if self.mismatch else crank)
        if self.mismatch:   # authenticated: a real peer of this job, with another cluster
            view = _extra({"cluster": lst.addresses})
            self._send(_CLUSTER_DIFFERS + struct.pack("<H", len(view)) + view)
            return Outcome(rejected=self.mismatch, fatal=self.mismatch)
        if self.transport_differs:  # authenticated too
            view = _extra({"transport": lst.transport})
            self._send(_TRANSPORT_DIFFERS + struct.pack("<H", len(view)) + view)
            return Outcome(rejected=self.transport_differs, fatal=self.transport_differs)
        self._send(_ACCEPTED)
        if self.channel == ABORT:  # authenticated: that rank will never connect
            why = str(self.hello.get("abort"))[:_MAX_ABORT_CHARS]
            return Outcome(fatal=f"tfx_dist rank {lst.rank}: rank {crank} failed before it could connect "
                                 f"(failing now rather than after TFX_TIMEOUT_S): {why}")
        to_server, to_client = wire_keys(lst.secret, self.nonce_c, self.nonce_s, self.transcript)
        return Outcome(accepted=(self.sock, self.same_host, to_client + to_server))
