"""What a state's commits and syncs tell the rest of the process: state that lives outside the
`State` and must follow its commits (a parameter server's tables: `parameter_server.elastic`).

A listener has three methods, called on every rank: ``committing()`` before a commit saves (it
may raise: then nothing is saved), ``committed()`` once it saved, and ``synced(root)`` after a
sync made every rank hold rank ``root``'s commit (a collective: every rank calls it).
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_listeners: list = []


def add(listener) -> None:
    """Adds ``listener`` (once)."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove(listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def active() -> bool:
    return bool(_listeners)


def _each():
    with _lock:
        return list(_listeners)


def committing() -> None:
    for listener in _each():
        listener.committing()


def committed() -> None:
    for listener in _each():
        listener.committed()


def synced(root: int) -> None:
    for listener in _each():
        listener.synced(root)
