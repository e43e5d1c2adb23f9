"""Connects the processes of a job and authenticates every connection.

Each rank listens on exactly the address the cluster gives it (never on all
interfaces), connects to every lower rank, and accepts connections from every
higher rank: one *data* connection per pair of ranks, plus one *control*
connection from every rank to rank 0 (the negotiation coordinator). The
connected sockets are then handed to the C++ communicator (``socket.detach``).

Handshake (client = the connecting, higher rank; all integers little-endian)::

    client -> server  HELLO   magic "TFXCOMM\\x01", version u16, channel u8,
                              client rank u32, size u32, server rank u32,
                              client nonce (32 bytes), host id (u16 length + utf-8)
    server -> client  WELCOME magic, version u16, server nonce (32),
                              HMAC-SHA256(secret, "server" | transcript), host id
    client -> server  PROOF   HMAC-SHA256(secret, "client" | transcript)
    server -> client  VERDICT 1 byte: 1 accepted, 0 rejected

where transcript = client nonce | server nonce | channel | client rank |
server rank | size. Both sides prove they know the job secret without sending
it, and fresh nonces on both sides stop replays. Bytes that do not start with
the magic are reported as garbage and the connection is dropped; the listener
keeps waiting for the real peers.

Why Python's hmac rather than OpenSSL in the C++ library: TensorFlow's
``libtensorflow_framework.so`` exports BoringSSL's HMAC symbols, so linking
libcrypto into our libraries risks a symbol clash inside the process; the
standard library's hmac/secrets are well maintained and the handshake is not
performance critical.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import secrets
import socket
import struct
import threading
import time

from tfx_dist.cluster import split_address

_log = logging.getLogger("tfx_dist.comm")

MAGIC = b"TFXCOMM\x01"
VERSION = 1
DATA, CONTROL = 1, 2
SERVICE = 3  # a request/response service connection (connect_service)
_NONCE = 32
_MAC = 32
_HELLO = struct.Struct("<8sHBIII32sH")      # magic, version, channel, rank, size, server rank, nonce, host len
_WELCOME = struct.Struct("<8sH32s32sH")     # magic, version, nonce, mac, host len


class RendezvousError(ConnectionError):
    """The processes of the job could not be connected (names the ranks involved)."""


@dataclasses.dataclass
class Connections:
    """Connected, authenticated sockets, as file descriptors owned by the caller."""

    data_fds: list[int]   # [size]; -1 at this rank
    ctrl_fds: list[int]   # rank 0: [size] (one per other rank); others: [0] = rank 0
    same_host: list[bool]


def host_id() -> str:
    """Identifies this machine (and boot) so that same-host peers can use shared memory."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}|{boot}"


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


def _transcript(nonce_c: bytes, nonce_s: bytes, channel: int, crank: int, srank: int, size: int) -> bytes:
    return nonce_c + nonce_s + struct.pack("<BIII", channel, crank, srank, size)


def _mac(secret: bytes, role: bytes, transcript: bytes) -> bytes:
    return hmac.new(secret, role + transcript, hashlib.sha256).digest()


class _Listener:
    """Accepts and authenticates the connections this rank expects, in a thread."""

    def __init__(self, rank: int, size: int, address: str, secret: bytes, deadline: float,
                 expected: set[tuple[int, int]] | None = None):
        self.rank, self.size, self.secret, self.deadline = rank, size, secret, deadline
        self.address = address
        host, port = split_address(address)
        info = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        self.sock = socket.socket(info[0], socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind(info[4])
        except OSError as e:
            self.sock.close()
            raise RendezvousError(f"tfx_dist rank {rank}: cannot listen on {address} (the address "
                                  f"the cluster gives this rank): {e}") from None
        self.sock.listen(64)
        if expected is not None:  # (channel, client rank) pairs
            self.expected = set(expected)
        else:
            self.expected = {(DATA, r) for r in range(rank + 1, size)}
            if rank == 0:
                self.expected |= {(CONTROL, r) for r in range(1, size)}
        self.accepted: dict[tuple[int, int], tuple[socket.socket, str]] = {}
        self.rejections: list[str] = []
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
            threading.Thread(target=self._handshake, args=(conn, peer_addr), daemon=True).start()

    def _reject(self, conn: socket.socket, why: str) -> None:
        _log.warning("tfx_dist rank %d: rejected a connection to %s: %s", self.rank, self.address, why)
        with self.lock:
            self.rejections.append(why)
        try:
            conn.close()
        except OSError:
            pass

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
            peer_host = _recv_exact(conn, hlen, "the handshake", deadline).decode("utf-8", "replace")
            if size != self.size or srank != self.rank or (channel, crank) not in self.expected:
                return self._reject(conn, f"connection from {where} claims rank {crank} of {size} "
                                          f"(channel {channel}) for rank {srank}; this is rank "
                                          f"{self.rank} of {self.size} and does not expect it")
            nonce_s = secrets.token_bytes(_NONCE)
            transcript = _transcript(nonce_c, nonce_s, channel, crank, self.rank, self.size)
            mine = host_id().encode()
            _send(conn, _WELCOME.pack(MAGIC, VERSION, nonce_s, _mac(self.secret, b"server", transcript),
                                      len(mine)) + mine, deadline)
            proof = _recv_exact(conn, _MAC, "the handshake", deadline)
            if not hmac.compare_digest(proof, _mac(self.secret, b"client", transcript)):
                _send(conn, b"\x00", deadline)
                return self._reject(conn, f"rank {crank} (from {where}) failed authentication: its job "
                                          f"secret differs from this rank's (TFX_JOB_SECRET)")
            _send(conn, b"\x01", deadline)
        except (OSError, TimeoutError, struct.error) as e:
            return self._reject(conn, f"handshake with {where} failed: {e}")
        with self.lock:
            if (channel, crank) in self.accepted:
                return self._reject(conn, f"rank {crank} connected twice")
            self.accepted[(channel, crank)] = (conn, peer_host)
            if set(self.accepted) == self.expected:
                self.done.set()

    def wait(self) -> dict:
        while not self.done.wait(0.05):
            if time.monotonic() > self.deadline:
                with self.lock:
                    missing = sorted({r for c, r in self.expected - set(self.accepted)})
                    rejected = "; ".join(self.rejections[-5:])
                raise RendezvousError(
                    f"tfx_dist rank {self.rank}: timed out waiting for rank(s) {missing} to connect to "
                    f"{self.address}" + (f". Rejected connections: {rejected}" if rejected else "") +
                    ". Check that every process started with the same cluster and TFX_JOB_SECRET; "
                    "raise TFX_TIMEOUT_S if they are only slow to start.")
        return self.accepted

    def close(self) -> None:
        self.done.set()
        self.sock.close()


def _connect(rank: int, size: int, server: int, address: str, channel: int, secret: bytes,
             deadline: float) -> tuple[socket.socket, str]:
    host, port = split_address(address)
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
            return _client_handshake(sock, rank, size, server, address, channel, secret, deadline)
        except _Retry as e:  # the peer's listener was not ours yet (port reuse); try again
            last_error = e
            sock.close()
            time.sleep(0.05)
        except BaseException:
            sock.close()
            raise


class _Retry(Exception):
    pass


def _client_handshake(sock, rank, size, server, address, channel, secret, deadline):
    who = f"rank {server} at {address}"
    nonce_c = secrets.token_bytes(_NONCE)
    mine = host_id().encode()
    try:
        _send(sock, _HELLO.pack(MAGIC, VERSION, channel, rank, size, server, nonce_c, len(mine)) + mine,
              deadline)
        head = _recv_exact(sock, _WELCOME.size, f"the handshake with {who}", deadline)
    except ConnectionError as e:
        raise _Retry(str(e)) from None
    except TimeoutError as e:
        raise RendezvousError(f"tfx_dist rank {rank}: {e}") from None
    magic, version, nonce_s, mac_s, hlen = _WELCOME.unpack(head)
    if magic != MAGIC:
        raise RendezvousError(f"tfx_dist rank {rank}: {who} answered with bytes that are not a "
                              f"tfx_dist handshake ({head[:8]!r}...): is another program on that port?")
    if version != VERSION:
        raise RendezvousError(f"tfx_dist rank {rank}: {who} speaks protocol version {version}, "
                              f"expected {VERSION}")
    peer_host = _recv_exact(sock, hlen, f"the handshake with {who}", deadline).decode("utf-8", "replace")
    transcript = _transcript(nonce_c, nonce_s, channel, rank, server, size)
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
    if verdict != b"\x01":
        raise RendezvousError(f"tfx_dist rank {rank}: {who} rejected this rank's authentication "
                              f"(TFX_JOB_SECRET differs)")
    sock.settimeout(None)
    return sock, peer_host


def connect_all(rank: int, size: int, addresses: list[str], secret: bytes,
                timeout_s: float) -> Connections:
    """Connects this rank to every other one; returns the connections' fds."""
    deadline = time.monotonic() + timeout_s
    listener = _Listener(rank, size, addresses[rank], secret, deadline)
    socks: list[socket.socket] = []
    try:
        data: dict[int, tuple[socket.socket, str]] = {}
        ctrl: dict[int, tuple[socket.socket, str]] = {}
        for server in range(rank):
            data[server] = _connect(rank, size, server, addresses[server], DATA, secret, deadline)
            socks.append(data[server][0])
        if rank > 0:
            ctrl[0] = _connect(rank, size, 0, addresses[0], CONTROL, secret, deadline)
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
    me = host_id()
    data_fds, ctrl_fds, same_host = [-1] * size, [-1] * size, [False] * size
    for peer, (sock, peer_host) in data.items():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        same_host[peer] = peer_host == me
        data_fds[peer] = sock.detach()
    for peer, (sock, _) in ctrl.items():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ctrl_fds[peer] = sock.detach()
    return Connections(data_fds, ctrl_fds, same_host)


def connect_service(role: str, index: int, server_addresses: list[str], num_clients: int, secret: bytes,
                    timeout_s: float) -> tuple[list[int], list[bool]]:
    """Connects a bipartite request/response service: every client to every server.

    A server (``role="server"``) listens on ``server_addresses[index]`` only and
    accepts clients ``0 .. num_clients-1``; a client (``role="client"``)
    connects to every server. Each connection is authenticated with the
    handshake above on channel ``SERVICE`` (client index as the client rank,
    server index as the server rank, ``num_clients`` as the size), so it
    cannot be taken for a collective connection. Returns (fds, same_host),
    one entry per peer (clients for a server, servers for a client); the fds
    are the caller's.
    """
    if role not in ("server", "client"):
        raise ValueError(f"Expected role 'server' or 'client'. Received: role={role!r}")
    deadline = time.monotonic() + timeout_s
    me = host_id()
    if role == "server":
        listener = _Listener(index, num_clients, server_addresses[index], secret, deadline,
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
                    conns.append(_connect(index, num_clients, server, address, SERVICE, secret, deadline))
                except RendezvousError as e:  # its "rank" words are the collective's: say who is who
                    raise RendezvousError(f"tfx_dist service client {index}, connecting to server {server} "
                                          f"at {address}: {e}") from None
        except BaseException:
            for sock, _ in conns:
                sock.close()
            raise
    fds, same_host = [], []
    for sock, peer_host in conns:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        same_host.append(peer_host == me)
        fds.append(sock.detach())
    return fds, same_host
