"""The server side of the rendezvous: accepts and authenticates the connections a rank expects.

A :class:`_Listener` accepts in a thread and runs each handshake in a thread
of its own (a bounded number at once); it rejects garbage, replays, ranks it
does not expect and peers with another secret, and fails early, naming the
cause, when the clusters differ, a peer's secret differs or a rank reports
that it failed before connecting (channel ABORT).
"""

from __future__ import annotations

import collections
import hmac
import logging
import secrets
import socket
import struct
import threading
import time

from tfx_dist.comm.rendezvous.auth import _mac, _transcript, wire_keys
from tfx_dist.comm.rendezvous.bind import _bind
from tfx_dist.comm.rendezvous.exceptions import RendezvousError, UnauthenticatedRendezvousError
from tfx_dist.comm.rendezvous.shm_probe import _can_open_probe
from tfx_dist.comm.rendezvous.wire import (
    _ACCEPTED, _CLUSTER_DIFFERS, _HELLO, _MAC, _MAX_ABORT_CHARS, _NONCE, _REJECTED, _WELCOME, ABORT,
    CONTROL, DATA, MAGIC, VERSION, _cluster_mismatch, _extra, _load_extra, _recv_exact, _same_cluster,
    _send, cluster_digest)

_log = logging.getLogger("tfx_dist.comm")

# A flood of bad connections (a fuzzer's or an attacker's: thousands a
# minute, for as long as the job waits) must not flood the log, nor hold a
# thread per connection while a full stderr pipe blocks the log line: the
# first rejections are logged one by one, then one line per
# _REJECTION_LOG_EVERY; at most _HANDSHAKE_THREADS handshakes run at once
# (the rest wait in the kernel's backlog).
_LOGGED_REJECTIONS = 20
_REJECTION_LOG_EVERY = 1000
_KEPT_REJECTIONS = 1000
_HANDSHAKE_THREADS = 64

# How long a rank whose proof failed may take to connect properly before the
# failure is taken as the cause (long enough that an impostor's attempt while
# the real rank starts up does not fail the job, far shorter than the timeout).
_AUTH_GRACE_S = 5.0


class _Listener:
    """Accepts and authenticates the connections this rank expects, in a thread."""

    def __init__(self, rank: int, size: int, addresses: list[str], secret: bytes, deadline: float,
                 expected: set[tuple[int, int]] | None = None):
        self.rank, self.size, self.secret, self.deadline = rank, size, secret, deadline
        self.addresses = list(addresses)
        self.address = address = addresses[rank]
        self.sock = _bind(rank, address)
        self.sock.listen(64)
        if expected is not None:  # (channel, client rank) pairs
            self.expected = set(expected)
        else:
            self.expected = {(DATA, r) for r in range(rank + 1, size)}
            if rank == 0:
                self.expected |= {(CONTROL, r) for r in range(1, size)}
        # (channel, client rank) -> (socket, same host, wire keys: send key + receive key)
        self.accepted: dict[tuple[int, int], tuple[socket.socket, bool, bytes]] = {}
        self.rejections: collections.deque[str] = collections.deque(maxlen=_KEPT_REJECTIONS)  # the latest
        self.rejected = 0
        self.handshake_slots = threading.BoundedSemaphore(_HANDSHAKE_THREADS)
        self.fatal: str | None = None   # the clusters differ: no point waiting for the timeout
        # Rank -> (when, why) of a proof that did not verify from a process
        # claiming an expected rank: a peer with another secret, unless that
        # rank still connects properly within _AUTH_GRACE_S (an impostor's
        # failed attempt must not fail the job).
        self.auth_failures: dict[int, tuple[float, str]] = {}
        self.client_nonces: set[bytes] = set()  # every HELLO's nonce: a repeat is a replay
        self.lock = threading.Lock()
        self.done = threading.Event()
        if not self.expected:
            self.done.set()
        self.thread = threading.Thread(target=self._run, name="tfx-comm-listener", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.is_set():
            self.sock.settimeout(0.2)
            try:
                conn, peer_addr = self.sock.accept()
            except socket.timeout:
                if time.monotonic() > self.deadline:
                    return
                continue
            except OSError:
                return
            while not self.handshake_slots.acquire(timeout=0.2):
                if self.done.is_set() or time.monotonic() > self.deadline:
                    conn.close()
                    return
            threading.Thread(target=self._handshake_in_slot, args=(conn, peer_addr), daemon=True).start()

    def _handshake_in_slot(self, conn: socket.socket, peer_addr) -> None:
        try:
            self._handshake(conn, peer_addr)
        finally:
            self.handshake_slots.release()

    def _reject(self, conn: socket.socket, why: str) -> None:
        try:
            conn.close()
        except OSError:
            pass
        with self.lock:
            self.rejections.append(why)
            self.rejected += 1
            count = self.rejected
        if count <= _LOGGED_REJECTIONS:
            _log.warning("tfx_dist rank %d: rejected a connection to %s: %s", self.rank, self.address, why)
        elif count % _REJECTION_LOG_EVERY == 0:
            _log.warning("tfx_dist rank %d: rejected %d connections to %s so far (only the first %d are "
                         "logged one by one); the latest: %s", self.rank, count, self.address,
                         _LOGGED_REJECTIONS, why)

    def _handshake(self, conn: socket.socket, peer_addr) -> None:
        where = f"{peer_addr[0]}:{peer_addr[1]}"
        # A stray or hostile client gets a few seconds, not the whole rendezvous.
        deadline = min(self.deadline, time.monotonic() + 10.0)
        try:
            head = _recv_exact(conn, _HELLO.size, "the handshake", deadline)
            magic, version, channel, crank, size, srank, nonce_c, hlen = _HELLO.unpack(head)
            if magic != MAGIC:
                return self._reject(conn, f"connection from {where} sent bytes that are not a tfx_dist "
                                          f"handshake (garbage {head[:8]!r}...)")
            if version != VERSION:
                return self._reject(conn, f"connection from {where} speaks protocol version {version}, "
                                          f"expected {VERSION} (mixed tfx_dist versions?)")
            with self.lock:
                replayed = nonce_c in self.client_nonces
                self.client_nonces.add(nonce_c)
            if replayed:  # a real client draws a fresh 32-byte nonce every time
                return self._reject(conn, f"connection from {where} replayed an earlier handshake "
                                          f"(its nonce was already used): refused; not a peer of "
                                          f"this job, or a relay")
            extra_c = _recv_exact(conn, hlen, "the handshake", deadline)
            hello = _load_extra(extra_c)
            mismatch = None
            if not _same_cluster(hello.get("cluster"), self.addresses):
                mismatch = _cluster_mismatch(self.rank, crank, f"connecting from {where}",
                                             hello.get("cluster"), self.addresses)
            elif size != self.size or srank != self.rank or (
                    (channel, crank) not in self.expected
                    and not (channel == ABORT and (CONTROL, crank) in self.expected)):
                return self._reject(conn, f"connection from {where} claims rank {crank} of {size} "
                                          f"(channel {channel}) for rank {srank}; this is rank "
                                          f"{self.rank} of {self.size} and does not expect it")
            nonce_s = secrets.token_bytes(_NONCE)
            same_host = _can_open_probe(hello.get("shm"))
            extra_s = _extra({"cluster": cluster_digest(self.addresses), "shm": same_host})
            # The client's claims: equal to this rank's own unless the clusters differ.
            transcript = _transcript(nonce_c, nonce_s, channel, crank, srank, size, extra_c, extra_s)
            _send(conn, _WELCOME.pack(MAGIC, VERSION, nonce_s, _mac(self.secret, b"server", transcript),
                                      len(extra_s)) + extra_s, deadline)
            proof = _recv_exact(conn, _MAC, "the handshake", deadline)
            if not hmac.compare_digest(proof, _mac(self.secret, b"client", transcript)):
                _send(conn, _REJECTED, deadline)
                why = (f"rank {crank} (from {where}) failed authentication: its job secret differs "
                       f"from this rank's (TFX_JOB_SECRET)")
                if not mismatch:
                    with self.lock:
                        self.auth_failures.setdefault(crank, (time.monotonic(), why))
                return self._reject(conn, why)
            if mismatch:   # authenticated: a real peer of this job, with another cluster
                view = _extra({"cluster": self.addresses})
                _send(conn, _CLUSTER_DIFFERS + struct.pack("<H", len(view)) + view, deadline)
                with self.lock:
                    self.fatal = mismatch
                return self._reject(conn, mismatch)
            _send(conn, _ACCEPTED, deadline)
            if channel == ABORT:  # authenticated: that rank will never connect
                why = str(hello.get("abort"))[:_MAX_ABORT_CHARS]
                with self.lock:
                    self.fatal = (f"tfx_dist rank {self.rank}: rank {crank} failed before it could connect "
                                  f"(failing now rather than after TFX_TIMEOUT_S): {why}")
                conn.close()
                return
            to_server, to_client = wire_keys(self.secret, nonce_c, nonce_s, transcript)
        except (OSError, TimeoutError, struct.error) as e:
            return self._reject(conn, f"handshake with {where} failed: {e}")
        with self.lock:
            twice = (channel, crank) in self.accepted
            if not twice:
                self.accepted[(channel, crank)] = (conn, same_host, to_client + to_server)
                if set(self.accepted) == self.expected:
                    self.done.set()
        if twice:  # outside the lock: _reject takes it
            self._reject(conn, f"rank {crank} connected twice")

    def wait(self) -> dict:
        while not self.done.wait(0.05):
            if self.fatal:
                raise RendezvousError(self.fatal)
            refused = self._refused_rank()
            if refused:
                raise UnauthenticatedRendezvousError(
                    f"tfx_dist rank {self.rank}: {refused}, and rank did not connect with the right "
                    f"secret within {_AUTH_GRACE_S:g} s: failing now rather than after "
                    f"TFX_TIMEOUT_S. Every process of the job needs the same TFX_JOB_SECRET.")
            if time.monotonic() > self.deadline:
                with self.lock:
                    missing = sorted({r for c, r in self.expected - set(self.accepted)})
                    rejected = "; ".join(list(self.rejections)[-5:])
                raise RendezvousError(
                    f"tfx_dist rank {self.rank}: timed out waiting for rank(s) {missing} to connect to "
                    f"{self.address}" + (f". Rejected connections: {rejected}" if rejected else "") +
                    ". Check that every process started with the same cluster and TFX_JOB_SECRET; "
                    "raise TFX_TIMEOUT_S if they are only slow to start.")
        return self.accepted

    def _refused_rank(self) -> str | None:
        """The rejection of an expected rank that has not connected since, once the grace is over."""
        now = time.monotonic()
        with self.lock:
            connected = {r for _, r in self.accepted}
            for rank, (when, why) in self.auth_failures.items():
                if rank not in connected and now - when > _AUTH_GRACE_S:
                    return why
        return None

    def close(self) -> None:
        self.done.set()
        self.sock.close()
