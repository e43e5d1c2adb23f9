"""The server side of the rendezvous: accepts and authenticates the connections a rank expects.

One thread runs every handshake at once, without blocking (a selector), so an
idle or slow connection costs a file descriptor, never a thread or a slot that
a real rank waits for. It rejects garbage, replays, ranks it does not expect
and peers with another secret, and reports each; it fails early, naming the
cause, only on what an outsider cannot forge:

- authenticated: the clusters or the transport settings differ (compared
  after both proofs verified), or a rank reports over the authenticated ABORT
  channel that it failed before connecting;
- unambiguous: a connection claiming rank k failed its proof, *and* the
  process listening at rank k's own address in the cluster answers with
  another secret when this rank connects back to it (a PROBE: its WELCOME's
  MAC does not verify). An impostor can claim any rank from anywhere, but it
  cannot answer at rank k's address while rank k holds it; until rank k is up
  there is nothing to answer, and this rank keeps waiting for it.

A proof that fails without that confirmation is only reported (in the log
and, at the timeout, in the error): an unauthenticated peer never decides the
job's fate. The client side needs no probe: it connected to the address the
cluster names, so a WELCOME whose MAC does not verify is the peer's secret
(``client``), and a rank that finds that keeps its listener open a moment
(``linger``) so that the peer's probe finds it.

Slow or idle connections are bounded three ways: the HELLO's fixed part must
arrive within _FIRST_BYTES_S (a real client sends it as it connects), the
whole handshake within _HANDSHAKE_S, and one source holds at most
_PENDING_PER_SOURCE handshakes (_PENDING in all): a new connection over the
bound evicts that source's oldest idle one, so a flood cannot keep a real
rank out (it retries a dropped handshake).
"""

from __future__ import annotations

import collections
import errno
import logging
import selectors
import socket
import threading
import time

from tfx_dist.comm.rendezvous.bind import _bind
from tfx_dist.comm.rendezvous.client import probe_secret
from tfx_dist.comm.rendezvous.exceptions import RendezvousError, UnauthenticatedRendezvousError
from tfx_dist.comm.rendezvous.server_handshake import Handshake, Outcome
from tfx_dist.comm.rendezvous.wire import CONTROL, DATA

_log = logging.getLogger("tfx_dist.comm")

# A flood of bad connections must not flood the log: the first rejections are
# logged one by one, then one line per _REJECTION_LOG_EVERY.
_LOGGED_REJECTIONS = 20
_REJECTION_LOG_EVERY = 1000
_KEPT_REJECTIONS = 1000
_FIRST_BYTES_S = 2.0
_HANDSHAKE_S = 10.0
_PENDING_PER_SOURCE = 16
_PENDING = 256
# One probe of a rank's address at a time, at most one a second (an
# impostor's attempts must not make this rank connect out in a loop).
_PROBE_EVERY_S = 1.0
_PROBE_S = 3.0


class _Listener:
    """Accepts and authenticates the connections this rank expects, in a thread."""

    def __init__(self, rank: int, size: int, addresses: list[str], secret: bytes, deadline: float,
                 expected: set[tuple[int, int]] | None = None, transport: dict | None = None):
        self.rank, self.size, self.secret, self.deadline = rank, size, secret, deadline
        self.addresses = list(addresses)
        self.address = addresses[self.rank]
        self.transport = dict(transport or {})
        self.sock = _bind(rank, self.address)
        self.sock.listen(128)
        self.sock.setblocking(False)
        # Only a job's ranks listen where a PROBE can reach them (a service's clients do not).
        self.can_probe = expected is None
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
        self.auth_failures: dict[int, str] = {}  # claimed rank -> the latest failed proof (not fatal)
        self.fatal: str | None = None          # authenticated or unambiguous: fail now
        self.fatal_unauthenticated = False
        self.client_nonces: set[bytes] = set()  # every HELLO's nonce: a repeat is a replay
        self.probes: dict[int, float] = {}      # rank -> when its address was last probed
        self.probe_answered = threading.Event()
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.closed = threading.Event()
        if not self.expected:
            self.done.set()
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.sock, selectors.EVENT_READ)
        # fd -> the handshake in flight there, oldest first
        self.pending: collections.OrderedDict[int, Handshake] = collections.OrderedDict()
        self.thread = threading.Thread(target=self._run, name="tfx-comm-listener", daemon=True)
        self.thread.start()

    # --- the selector loop ---------------------------------------------------------------
    def _run(self) -> None:
        try:
            while not self.closed.is_set():
                for key, _ in self.selector.select(timeout=0.1):
                    if key.fileobj is self.sock:
                        self._accept()
                    else:
                        self._feed(self.pending.get(key.fd))
                self._expire(time.monotonic())
        except (OSError, ValueError):  # closed under us
            pass
        finally:
            for hs in list(self.pending.values()):
                hs.sock.close()
            self.pending.clear()

    def _accept(self) -> None:
        for _ in range(64):  # a burst at a time, then the handshakes in flight get their turn
            try:
                conn, peer_addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of fds (a flood): the oldest handshake makes room
                if e.errno in (errno.EMFILE, errno.ENFILE) and self.pending:
                    victim = next(iter(self.pending.values()))
                    self._drop(victim, f"connection from {victim.where} evicted: this process is out of "
                                       f"file descriptors (a flood?)")
                return
            conn.setblocking(False)
            hs = Handshake(self, conn, peer_addr, time.monotonic())
            self._make_room(hs.source)
            self.pending[conn.fileno()] = hs
            self.selector.register(conn, selectors.EVENT_READ)

    def _make_room(self, source: str) -> None:
        """Evicts the oldest (idle first) handshake of a source at its bound, or of all at theirs."""
        mine = [hs for hs in self.pending.values() if hs.source == source]
        for crowd, bound, whose in ((mine, _PENDING_PER_SOURCE, f"from {source}"),
                                    (list(self.pending.values()), _PENDING, "in all")):
            if len(crowd) >= bound:
                idle = [hs for hs in crowd if hs.idle()]
                victim = (idle or crowd)[0]
                self._drop(victim, f"connection from {victim.where} evicted: {bound} handshakes "
                                   f"{whose} at once (a flood, or a stuck client)")

    def _feed(self, hs: Handshake | None) -> None:
        if hs is None:
            return
        try:
            outcome = hs.on_readable()
        except Exception as e:  # noqa: BLE001 - no connection may stop the listener
            outcome = Outcome(rejected=f"handshake with {hs.where} failed: {type(e).__name__}: {e}")
        if outcome is not None:
            self._settle(hs, outcome)

    def _expire(self, now: float) -> None:
        for hs in list(self.pending.values()):
            if hs.idle() and now - hs.started > _FIRST_BYTES_S:
                self._drop(hs, f"connection from {hs.where} sent no handshake within {_FIRST_BYTES_S:g} s "
                               f"(an idle connection): dropped")
            elif now - hs.started > _HANDSHAKE_S or now > self.deadline:
                self._drop(hs, f"connection from {hs.where} did not finish the handshake within "
                               f"{_HANDSHAKE_S:g} s: dropped")

    def _forget(self, hs: Handshake) -> None:
        if self.pending.pop(hs.sock.fileno(), None) is not None:
            self.selector.unregister(hs.sock)

    def _drop(self, hs: Handshake, why: str | None) -> None:
        self._forget(hs)
        hs.sock.close()
        if why:
            self._reject(why)

    def _settle(self, hs: Handshake, outcome: Outcome) -> None:
        if outcome.accepted is None:
            self._drop(hs, outcome.rejected)
        else:
            self._forget(hs)
            hs.sock.setblocking(True)
            self._accept_connection(hs, outcome.accepted)
        if outcome.fatal:
            with self.lock:
                self.fatal = self.fatal or outcome.fatal
        if outcome.auth_failed is not None:
            self._auth_failed(outcome.auth_failed, outcome.rejected)
        if outcome.probed:
            self.probe_answered.set()

    def _accept_connection(self, hs: Handshake, value) -> None:
        key = (hs.channel, hs.crank)
        with self.lock:
            twice = key in self.accepted
            if not twice:
                self.accepted[key] = value
                if set(self.accepted) == self.expected:
                    self.done.set()
        if twice:
            hs.sock.close()
            self._reject(f"rank {hs.crank} connected twice")

    # --- reports ---------------------------------------------------------------------------
    def _reject(self, why: str) -> None:
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

    # --- a failed proof: an impostor, or a peer with another secret? --------------------
    def _auth_failed(self, crank: int, why: str) -> None:
        with self.lock:
            self.auth_failures[crank] = why
            connected = any(r == crank for _, r in self.accepted)
            now = time.monotonic()
            if (not self.can_probe or connected or not 0 <= crank < self.size or crank == self.rank
                    or now - self.probes.get(crank, -1e9) < _PROBE_EVERY_S):
                return
            self.probes[crank] = now
        threading.Thread(target=self._probe, args=(crank,), name="tfx-comm-probe", daemon=True).start()

    def _probe(self, crank: int) -> None:
        deadline = min(self.deadline, time.monotonic() + _PROBE_S)
        same = probe_secret(self.rank, self.size, crank, self.addresses, self.secret, deadline)
        if same is False:
            with self.lock:
                self.fatal_unauthenticated = True
                self.fatal = self.fatal or (
                    f"tfx_dist rank {self.rank}: rank {crank} failed authentication, and the process "
                    f"listening at {self.addresses[crank]} (rank {crank}'s address in the cluster) "
                    f"answers with another job secret: failing now rather than after TFX_TIMEOUT_S. "
                    f"Every process of the job needs the same TFX_JOB_SECRET.")
        elif same:
            self._reject(f"a connection claiming rank {crank} failed authentication, but rank {crank} at "
                         f"{self.addresses[crank]} holds this job's secret: an impostor, ignored")

    # --- the caller's side -----------------------------------------------------------------
    def wait(self) -> dict:
        while not self.done.wait(0.05):
            with self.lock:
                fatal, unauthenticated = self.fatal, self.fatal_unauthenticated
            if fatal:
                raise (UnauthenticatedRendezvousError if unauthenticated else RendezvousError)(fatal)
            if time.monotonic() > self.deadline:
                raise RendezvousError(self._timeout_message())
        self._report()
        return self.accepted

    def _timeout_message(self) -> str:
        with self.lock:
            missing = sorted({r for c, r in self.expected - set(self.accepted)})
            rejected = "; ".join(list(self.rejections)[-5:])
            auth = "; ".join(self.auth_failures[r] for r in missing if r in self.auth_failures)
        return (f"tfx_dist rank {self.rank}: timed out waiting for rank(s) {missing} to connect to "
                f"{self.address}" + (f". Rejected connections: {rejected}" if rejected else "")
                + (f". Failed authentication (another TFX_JOB_SECRET, or an impostor: not confirmed "
                   f"at that rank's address): {auth}" if auth else "")
                + ". Check that every process started with the same cluster and TFX_JOB_SECRET; "
                "raise TFX_TIMEOUT_S if they are only slow to start.")

    def _report(self) -> None:
        with self.lock:
            rejected, latest = self.rejected, (self.rejections[-1] if self.rejections else "")
        if rejected:
            _log.warning("tfx_dist rank %d: connected every rank; rejected %d other connection attempt(s) "
                         "to %s on the way (the latest: %s)", self.rank, rejected, self.address, latest)

    def linger(self, seconds: float) -> None:
        """Keeps answering a peer's PROBE for up to ``seconds`` (this rank found another secret)."""
        self.probe_answered.wait(seconds)

    def close(self) -> None:
        self.done.set()
        self.closed.set()
        self.thread.join(timeout=2.0)
        try:
            self.selector.close()
        except (OSError, ValueError):
            pass
        self.sock.close()
