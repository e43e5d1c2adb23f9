"""A worker's side of the elastic driver (``tfx-dist-run --elastic``): which generation it is in.

Requests and answers are authenticated with the job secret
(``tfx_dist.launcher.elastic_protocol``). A thread asks the driver every
``POLL_S`` whether anything changed since this generation began, so that
:meth:`DriverClient.changed_since` (``membership.pending_change``) costs a
read of a flag.
"""

from __future__ import annotations

import threading

from tfx_dist import errors, settings
from tfx_dist.elastic.generation import Generation
from tfx_dist.launcher.elastic_protocol import ProtocolError, ask

POLL_S = 0.5
_POLL_TIMEOUT_S = 10.0


class DriverClient:
    """Talks to the elastic driver at ``address`` as worker ``name``."""

    def __init__(self, address: str, name: str, secret: bytes):
        self.address, self.name, self.secret = address, name, secret
        self._lock = threading.Lock()
        self._generation = -1
        self._changed = False
        self._stopped = threading.Event()
        self._watcher: threading.Thread | None = None

    @classmethod
    def from_settings(cls) -> "DriverClient":
        name = str(settings.get("TFX_ELASTIC_WORKER"))
        secret = str(settings.get("TFX_JOB_SECRET"))
        if not name or not secret:
            raise ValueError("TFX_ELASTIC_DRIVER is set but TFX_ELASTIC_WORKER or TFX_JOB_SECRET is "
                             "not: start elastic workers with `tfx-dist-run --elastic`.")
        return cls(str(settings.get("TFX_ELASTIC_DRIVER")), name, secret.encode("utf-8"))

    def first_generation(self, timeout_s: float):
        """Waits until the driver lists this worker in a generation (the first, or a running job's
        next one); returns ``(Generation, addresses)``."""
        return self._generation_of(self._ask({"op": "join"}, timeout_s))

    def next_generation(self, after: int, timeout_s: float):
        """This member of generation ``after`` resets: returns the next generation it is in."""
        return self._generation_of(self._ask({"op": "next", "after": after}, timeout_s))

    def next_session(self, after: int, timeout_s: float):
        """A parameter server's question: the first generation past ``after`` (the latest one
        formed); returns ``(number, member names)``. Raises AbortedError when the job stops."""
        answer = self._ask({"op": "session", "after": after}, timeout_s)
        return int(answer["number"]), [str(m) for m in answer["members"]]

    def began(self, number: int) -> None:
        """Generation ``number`` is running here: changes are counted from now on."""
        with self._lock:
            self._generation, self._changed = number, False
            if self._watcher is None:
                self._watcher = threading.Thread(target=self._watch, name="tfx-elastic-watch", daemon=True)
                self._watcher.start()

    def changed_since(self, number: int) -> bool:
        with self._lock:
            return self._changed and self._generation == number

    def close(self) -> None:
        self._stopped.set()

    def _watch(self) -> None:
        while not self._stopped.wait(POLL_S):
            with self._lock:
                number, known = self._generation, self._changed
            if known:
                continue
            try:
                answer = ask(self.address, self.secret, {"op": "changed", "worker": self.name,
                                                         "after": number}, _POLL_TIMEOUT_S)
            except (ProtocolError, OSError, ValueError):
                continue  # the driver is gone or busy: the next collective tells
            with self._lock:
                if self._generation == number and answer.get("changed"):
                    self._changed = True

    def _ask(self, request: dict, timeout_s: float) -> dict:
        request = dict(request, worker=self.name, timeout_s=timeout_s)
        try:
            answer = ask(self.address, self.secret, request, timeout_s + 5.0)
        except (ProtocolError, OSError) as e:
            raise errors.UnavailableError(
                f"tfx_dist elastic worker {self.name}: no generation from the driver at "
                f"{self.address} within {timeout_s:g} s: {e}") from None
        if "stop" in answer:
            raise errors.AbortedError(f"tfx_dist elastic worker {self.name}: the driver stopped this "
                                      f"worker: {answer['stop']}")
        return answer

    @staticmethod
    def _generation_of(answer: dict):
        generation = Generation(int(answer["number"]), int(answer["rank"]), int(answer["size"]),
                                tuple(int(r) for r in answer["joined"]))
        return generation, [str(a) for a in answer["addresses"]]
