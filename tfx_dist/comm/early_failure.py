"""A rank that fails before its rendezvous finished tells rank 0.

Without a launcher, rank 0 only learns that a peer will never connect when
``TFX_TIMEOUT_S`` (300 s by default) runs out. When a ``Communicator`` is
built (by the strategy) for a multi-worker job and this process holds the
job secret, it *arms*: an exception that reaches the top of the script
(``sys.excepthook``: a bad setting, Ctrl-C) before this process finished its
rendezvous then tells rank 0 over the rendezvous's authenticated ABORT
channel (``rendezvous.tell_rank_0``), and rank 0 fails at once naming this
rank and the exception.

Not covered, and still seen by rank 0 only at ``TFX_TIMEOUT_S``: a process
killed by a signal (SIGKILL, the OOM killer) or one that calls ``os._exit``
or ``sys.exit`` (no exception reaches the hook), an exception the script
catches itself, and any failure before the Communicator is built (resolving
the cluster has no side effects, so it arms nothing).
"""

from __future__ import annotations

import sys
import threading
import traceback

# What telling rank 0 needs, set by arm(); None once a rendezvous finished.
_armed: dict | None = None
_lock = threading.Lock()
_previous_hook = None


def arm(rank: int, size: int, addresses, secret: bytes | str | None, timeout_s: float = 5.0) -> bool:
    """Arms the hook for rank ``rank`` (> 0) of a job of ``size``; returns
    whether it is armed (rank 0, a job of one, or no secret: nothing to tell).
    ``timeout_s``: how long the hook tries to reach rank 0 (it may not listen yet)."""
    if rank <= 0 or size <= 1 or not secret or not addresses:
        return False
    if isinstance(secret, str):
        secret = secret.encode("utf-8")
    global _armed, _previous_hook
    with _lock:
        _armed = {"rank": int(rank), "size": int(size), "addresses": list(addresses),
                  "secret": bytes(secret), "timeout_s": float(timeout_s)}
        if sys.excepthook is not _hook:
            _previous_hook = sys.excepthook
            sys.excepthook = _hook
    return True


def disarm() -> None:
    """This process finished a rendezvous: rank 0 now sees its failures itself."""
    global _armed
    with _lock:
        _armed = None


def is_armed() -> bool:
    return _armed is not None


def _summary(exc_type, exc, tb) -> str:
    where = traceback.extract_tb(tb)[-1] if tb is not None else None
    at = f" (at {where.filename}:{where.lineno})" if where is not None else ""
    return f"its script raised {exc_type.__name__}: {exc}{at}"


def _hook(exc_type, exc, tb):
    with _lock:
        armed = _armed
    if armed is not None:
        from tfx_dist.comm import rendezvous  # late: the hook may never fire

        # A rendezvous error is one rank 0 sees too (same handshake, same
        # timeout) or was already told (connect_all): telling it again would
        # only keep this process up to 5 s longer.
        if not isinstance(exc, rendezvous.RendezvousError):
            rendezvous.tell_rank_0(armed["rank"], armed["size"], armed["addresses"], armed["secret"],
                                   _summary(exc_type, exc, tb), armed["timeout_s"])
    (_previous_hook or sys.__excepthook__)(exc_type, exc, tb)
