"""The elastic driver: which workers form each generation of the job, told to them on request.

The launcher (``elastic``) starts and watches the worker processes and tells
the driver when one is started (:meth:`Driver.add_worker`) or has exited
(:meth:`Driver.worker_exited`). The workers ask (``elastic_protocol``):

- ``address`` (from ``remote_worker``, before the worker's command starts):
  the address a worker started on another host listens at, which it picked
  there (:meth:`Driver.add_worker` without one).
- ``join``: a worker is ready (TensorFlow loaded, about to connect). Before
  the first generation, it forms once every started worker is ready. Later, a
  worker that asks is a *joiner*: the members see a change pending and it is
  added at the next generation, listed in ``joined`` (it holds no state yet).
- ``next``: a member of generation ``after`` resets (a peer was lost, or a
  change is pending). The next generation forms once every member still
  running has asked, or ``window_s`` after the first asked (a member that
  stays silent is dropped and stopped by the launcher). Its members: those
  that asked, in their old rank order, then the joiners.
- ``changed``: has anything happened since generation ``after`` began (a
  member exited, a joiner is ready)? Never blocks.
- ``session`` (from a parameter server, :meth:`Driver.add_server`): waits for
  a generation past ``after``; answers the latest one's number and members,
  whom the server serves next (``tfx_dist.parameter_server.elastic``).

Below ``min_workers`` the driver answers every waiting worker ``stop`` with the
reason (the launcher then stops the job with every lost worker's errors).
"""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from typing import Dict, List, Optional

from tfx_dist.launcher.elastic_protocol import ProtocolError, serve_one

_REQUEST_S = 10.0  # for a request to arrive once connected


@dataclasses.dataclass
class _Worker:
    name: str
    address: Optional[str]  # None until a worker started on another host tells it
    running: bool = True
    ready: bool = False     # asked to join
    asked_after: int = -2   # the generation after which it asked `next` (-2: never)


@dataclasses.dataclass
class Formed:
    number: int
    members: List[str]
    joined: List[str]


class Driver:
    """The membership of an elastic job, and a server that tells it to the workers.

    Args:
      host: the address the driver listens on (the cluster's, never all interfaces).
      secret: the job secret (bytes).
      min_workers: fewer workers than this stops the job.
      window_s: how long a generation waits for a silent member once another asked.
      start_window_s: how long a generation that would be below ``min_workers`` waits for
        more workers (a replacement loading TensorFlow) before the job stops.
    """

    def __init__(self, host: str, secret: bytes, min_workers: int, window_s: float = 30.0,
                 start_window_s: float = 300.0):
        self.secret, self.min_workers, self.window_s = secret, min_workers, window_s
        self.start_window_s = start_window_s
        self._cond = threading.Condition()
        self._workers: Dict[str, _Worker] = {}
        self._servers: set = set()     # parameter servers' names: they ask `session` only
        self._generation: Optional[Formed] = None
        self._first_ask: Optional[float] = None
        self._changed_at = -1          # the generation during which something changed
        self.stopped: Optional[str] = None
        self.dropped: List[str] = []   # members a generation left out though running (silent)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.socket(family, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self._sock.listen(64)
        self.address = f"{host}:{self._sock.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._serve, name="tfx-elastic-driver", daemon=True).start()

    # -- the launcher's side --------------------------------------------------------------------

    def add_worker(self, name: str, address: Optional[str]) -> None:
        """A worker started, listening at ``address`` (None: it tells it, ``address``)."""
        with self._cond:
            self._workers[name] = _Worker(name, address)
            self._cond.notify_all()

    def add_server(self, name: str) -> None:
        with self._cond:
            self._servers.add(name)

    def worker_exited(self, name: str) -> None:
        with self._cond:
            self._workers[name].running = False
            if self._generation is not None and name in self._generation.members:
                self._changed_at = max(self._changed_at, self._generation.number)
            self._cond.notify_all()

    def stop(self, reason: str) -> None:
        """Every waiting and later request is answered ``stop`` with ``reason``."""
        with self._cond:
            self.stopped = self.stopped or reason
            self._cond.notify_all()

    def take_dropped(self) -> List[str]:
        """The members left out of a generation though running (silent), once each."""
        with self._cond:
            dropped, self.dropped = self.dropped, []
            return dropped

    def generation(self) -> Optional[Formed]:
        with self._cond:
            return self._generation

    def close(self) -> None:
        self._closed = True
        self.stop("the launcher is ending the job")
        self._sock.close()

    # -- the rules ------------------------------------------------------------------------------

    def _form(self, number: int, members: List[str], joined: List[str]) -> None:
        self._generation = Formed(number, members, joined)
        self._first_ask = None
        for name in members:  # from now on a member; ready again only if left out
            self._workers[name].ready = False
        self._cond.notify_all()

    def _try_form(self) -> None:
        """Forms the next generation if its rule holds (called under the lock)."""
        if self.stopped:
            return
        workers = self._workers.values()
        joiners = [w.name for w in workers if w.running and w.ready]
        current = self._generation
        if current is None:
            if joiners and all(w.ready for w in workers if w.running) and not self._too_few(len(joiners)):
                self._form(0, sorted(joiners, key=self._started_order), [])
            return
        asked = [m for m in current.members
                 if self._workers[m].running and self._workers[m].asked_after == current.number]
        if not asked:
            return
        silent = [m for m in current.members
                  if self._workers[m].running and self._workers[m].asked_after != current.number]
        if silent and time.monotonic() - (self._first_ask or 0) < self.window_s:
            return
        new_joiners = [j for j in joiners if j not in current.members]
        if self._too_few(len(asked) + len(new_joiners)):
            return
        self.dropped.extend(silent)
        self._form(current.number + 1, asked + new_joiners, new_joiners)

    def _too_few(self, count: int) -> bool:
        """Below ``min_workers``: wait ``start_window_s`` (from the first request of this
        generation) for replacements to be ready, then stop the job."""
        if count >= self.min_workers:
            return False
        if time.monotonic() - (self._first_ask or time.monotonic()) >= self.start_window_s:
            lost = sorted(w.name for w in self._workers.values() if not w.running)
            self.stop(f"only {count} worker(s) left, below --min-workers {self.min_workers} "
                      f"(lost: {', '.join(lost) or 'none'})")
        return True

    def _started_order(self, name: str) -> int:
        return list(self._workers).index(name)

    def _answer(self, name: str) -> dict:
        generation = self._generation
        members = generation.members
        return {"number": generation.number, "rank": members.index(name), "size": len(members),
                "addresses": [self._workers[m].address for m in members],
                "joined": [members.index(j) for j in generation.joined]}

    def _wait_for(self, name: str, after: int, deadline: float) -> dict:
        """Blocks until a generation past ``after`` lists ``name`` (or the job stops)."""
        while True:
            self._try_form()
            if self.stopped:
                return {"stop": self.stopped}
            current = self._generation
            if current is not None and current.number > after and name in current.members:
                return self._answer(name)
            left = deadline - time.monotonic()
            if left <= 0:
                return {"stop": f"no generation after {after} formed with worker {name} in time"}
            self._cond.wait(min(left, 0.2))  # the window's end is noticed by polling

    def _wait_for_session(self, after: int, deadline: float) -> dict:
        """Blocks until a generation past ``after`` formed; answers the latest one."""
        while True:
            self._try_form()
            if self.stopped:
                return {"stop": self.stopped}
            current = self._generation
            if current is not None and current.number > after:
                return {"number": current.number, "members": list(current.members)}
            left = deadline - time.monotonic()
            if left <= 0:
                return {"stop": f"no generation after {after} formed in time"}
            self._cond.wait(min(left, 0.2))

    def handle(self, request: dict) -> dict:
        op, name = request.get("op"), str(request.get("worker"))
        timeout_s = float(request.get("timeout_s", 300.0))
        deadline = time.monotonic() + timeout_s
        with self._cond:
            if name in self._servers and op == "session":
                return self._wait_for_session(int(request.get("after", -1)), deadline)
            worker = self._workers.get(name)
            if worker is None:
                return {"stop": f"the driver started no worker named {name!r}"}
            after = int(request.get("after", -1))
            if op == "address":
                if worker.address is None:  # told once, before the worker can join
                    worker.address = str(request.get("address"))
                return {"address": worker.address}
            if op == "changed":
                return {"changed": bool(self.stopped) or self._changed_at >= after}
            if op == "join":
                worker.ready = True
                if self._generation is None and self._first_ask is None:
                    self._first_ask = time.monotonic()
                if self._generation is not None:
                    self._changed_at = max(self._changed_at, self._generation.number)
                self._cond.notify_all()
                return self._wait_for(name, self._generation.number if self._generation else -1,
                                      deadline)
            if op == "next":
                current = self._generation
                if current is not None and current.number > after and name in current.members:
                    return self._answer(name)
                if current is None or name not in current.members or current.number != after:
                    # Left out meanwhile: it comes back as a joiner (it holds stale state).
                    worker.ready = True
                    self._changed_at = max(self._changed_at, current.number if current else -1)
                    self._cond.notify_all()
                    return self._wait_for(name, current.number if current else -1, deadline)
                worker.asked_after = after
                if self._first_ask is None:
                    self._first_ask = time.monotonic()
                self._cond.notify_all()
                return self._wait_for(name, after, deadline)
            return {"stop": f"unknown request {op!r}"}

    # -- the server -----------------------------------------------------------------------------

    def _serve(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn: socket.socket) -> None:
        with conn:
            try:
                serve_one(conn, self.secret, self.handle, _REQUEST_S)
            except (ProtocolError, OSError, ValueError):
                pass  # an outsider or a worker that died while waiting: nothing to answer
