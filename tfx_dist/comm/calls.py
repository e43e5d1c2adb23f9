"""Which call a collective belongs to: each rank's k-th fit/evaluate/predict meets the others' k-th.

Ranks pair collectives by name, and a traced function's names are the same
in every call of it. So when one rank's call fails before its first
collective and the script goes on, its *next* call's collectives would pair
with the other ranks' *current* call, and return their results without an
error wherever the shapes agree. Each request therefore carries its call's
label ("predict call 2"; ``tfx_comm_set_call``), and the negotiation compares
it like the shape: a collective of one call never completes against one of
another, and the error names both.

Labels count the calls of models under a multi-worker tfx_dist strategy only
(`_tf_compat.keras_calls` begins and ends them), per kind, in this process; a
call inside another (``fit``'s validation ``evaluate``) has its own label and
gives the outer one back when it ends, also when it raises.
"""

from __future__ import annotations

import collections
import contextlib
import threading

from tfx_dist.comm import _native

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()
_stack: list[str] = []


def current() -> str:
    """The label of the call running now ("" outside every call)."""
    with _lock:
        return _stack[-1] if _stack else ""


def _publish() -> None:
    _native.lib().tfx_comm_set_call((_stack[-1] if _stack else "").encode())


@contextlib.contextmanager
def call(kind: str):
    """Labels the collectives submitted inside as this process's next ``kind`` call."""
    with _lock:
        _counts[kind] += 1
        _stack.append(f"{kind} call {_counts[kind]}")
        _publish()
    try:
        yield
    finally:
        with _lock:
            _stack.pop()
            _publish()


def restart_counting() -> None:
    """Counts calls from the first again (after an elastic reset, as in a new process: a worker that
    joined makes its first call when the others make theirs). A call in progress keeps its label."""
    with _lock:
        _counts.clear()
