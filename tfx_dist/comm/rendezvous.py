"""Connects the processes of a job and authenticates every connection.

Each rank listens on exactly the address the cluster gives it (never on all
interfaces), connects to every lower rank, and accepts connections from every
higher rank: one *data* connection per pair of ranks, plus one *control*
connection from every rank to rank 0 (the negotiation coordinator). The
connected sockets are then handed to the C++ communicator (``socket.detach``).

Handshake (client = the connecting, higher rank; all integers little-endian)::

    client -> server  HELLO   magic "TFXCOMM\\x01", version u16, channel u8,
                              client rank u32, size u32, server rank u32,
                              client nonce (32 bytes), extra (u16 length + JSON:
                              {"cluster": [address, ...], "shm": probe name})
    server -> client  WELCOME magic, version u16, server nonce (32),
                              HMAC-SHA256(secret, "server" | transcript), extra
                              (u16 length + JSON: {"cluster": sha256 hex,
                              "shm": true if it could open the probe})
    client -> server  PROOF   HMAC-SHA256(secret, "client" | transcript)
    server -> client  VERDICT 1 byte: 1 accepted, 0 rejected, 2 the clusters
                              differ (then u16 length + the server's cluster
                              as JSON, so that both sides can name both views)

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

The clusters must agree: each side compares the other's list of addresses
with its own, after authentication, and a mismatch fails both ranks at once
with both lists (rather than a hang, or a wrong job formed from two).

Same host? Shared memory works between two processes exactly when they see
the same ``/dev/shm`` (the C++ ``ShmPair`` maps a POSIX segment created with
mode 0600 there). So rather than compare host names (equal in containers,
and in the tests' simulated hosts) or any identity, the client *probes*: it
creates a fresh segment with a random 128-bit name in its ``/dev/shm``, names
it in HELLO, and the server reports whether it can open it and read the
nonce it holds. That answer is true on one machine (one mount and IPC
namespace, same user), false across machines, containers with private
``/dev/shm``, or users, whatever the host names; and it is the very operation
the shared-memory transport needs. The answer is bound into the MACs.

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

import collections
import dataclasses
import errno
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
import socket
import struct
import threading
import time

from tfx_dist.cluster import split_address

_log = logging.getLogger("tfx_dist.comm")

MAGIC = b"TFXCOMM\x01"
VERSION = 2
DATA, CONTROL = 1, 2
SERVICE = 3  # a request/response service connection (connect_service)
ABORT = 4    # a rank that failed before connecting tells rank 0 why (connect_all), then hangs up
_NONCE = 32
_MAC = 32
_HELLO = struct.Struct("<8sHBIII32sH")      # magic, version, channel, rank, size, server rank, nonce, extra len
_WELCOME = struct.Struct("<8sH32s32sH")     # magic, version, nonce, mac, extra len
_ACCEPTED, _REJECTED, _CLUSTER_DIFFERS = b"\x01", b"\x00", b"\x02"


class RendezvousError(ConnectionError):
    """The processes of the job could not be connected (names the ranks involved)."""


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


_SHM_DIR = "/dev/shm"
_PROBE_NAME = re.compile(r"^tfx-probe-[0-9]+-[0-9a-f]{32}$")


class _ShmProbe:
    """A fresh segment in this process's /dev/shm (see "Same host?" above); removed by close()."""

    def __init__(self):
        self.name = f"tfx-probe-{os.getpid()}-{secrets.token_hex(16)}"  # pid: swept if we die
        self.path = os.path.join(_SHM_DIR, self.name)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:  # no /dev/shm here: no shared memory either
            self.name = ""
            return
        with os.fdopen(fd, "wb") as f:
            f.write(self.name.encode())

    def close(self) -> None:
        if self.name:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _can_open_probe(name: object) -> bool:
    """True if the client's probe segment is visible here (the name is checked: no paths)."""
    if not isinstance(name, str) or not _PROBE_NAME.match(name):
        return False
    try:
        with open(os.path.join(_SHM_DIR, name), "rb") as f:
            return f.read(64) == name.encode()
    except OSError:
        return False


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


# A flood of bad connections (issue 19's minutes of fuzzing) must not flood
# the log, nor hold a thread per connection while a full stderr pipe blocks
# the log line: the first rejections are logged one by one, then one line
# per _REJECTION_LOG_EVERY; at most _HANDSHAKE_THREADS handshakes run at
# once (the rest wait in the kernel's backlog).
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
                raise RendezvousError(
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
        raise RendezvousError(f"tfx_dist rank {rank}: {who} failed authentication: its job secret "
                              f"differs from this rank's (TFX_JOB_SECRET must be the same in every "
                              f"process of the job)")
    _send(sock, _mac(secret, b"client", transcript), deadline)
    verdict = _recv_exact(sock, 1, f"the handshake with {who}", deadline)
    if verdict == _CLUSTER_DIFFERS:
        (n,) = struct.unpack("<H", _recv_exact(sock, 2, f"the handshake with {who}", deadline))
        theirs = _load_extra(_recv_exact(sock, n, f"the handshake with {who}", deadline))
        raise RendezvousError(_cluster_mismatch(rank, server, f"at {address}",
                                                theirs.get("cluster"), addresses))
    if verdict != _ACCEPTED:
        raise RendezvousError(f"tfx_dist rank {rank}: {who} rejected this rank's authentication "
                              f"(TFX_JOB_SECRET differs)")
    sock.settimeout(None)
    to_server, to_client = wire_keys(secret, nonce_c, nonce_s, transcript)
    return sock, _load_extra(extra_s).get("shm") is True, to_server + to_client


# The longest error an ABORT carries, and how long a failing rank tries to tell rank 0.
_MAX_ABORT_CHARS = 2000
_ABORT_TRY_S = 5.0


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
                timeout_s: float) -> Connections:
    """Connects this rank to every other one; returns the connections' fds."""
    deadline = time.monotonic() + timeout_s
    try:
        listener = _Listener(rank, size, addresses, secret, deadline)
    except RendezvousError as e:  # this rank cannot take part: rank 0 need not wait for it
        if rank > 0:
            tell_rank_0(rank, size, addresses, secret, str(e), timeout_s)
        raise
    socks: list[socket.socket] = []
    try:
        data: dict[int, tuple[socket.socket, bool, bytes]] = {}
        ctrl: dict[int, tuple[socket.socket, bool, bytes]] = {}
        for server in range(rank):
            data[server] = _connect(rank, size, server, addresses, DATA, secret, deadline)
            socks.append(data[server][0])
        if rank > 0:
            ctrl[0] = _connect(rank, size, 0, addresses, CONTROL, secret, deadline)
            socks.append(ctrl[0][0])
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
                    timeout_s: float) -> tuple[list[int], list[bool], list[bytes]]:
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
                             expected={(SERVICE, c) for c in range(num_clients)})
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
                                          deadline))
                except RendezvousError as e:  # its "rank" words are the collective's: say who is who
                    raise RendezvousError(f"tfx_dist service client {index}, connecting to server {server} "
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
