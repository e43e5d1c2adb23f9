"""Dropped input iterators are destroyed on a background thread, off the training path.

Keras makes a new distributed iterator every epoch (unless ``steps_per_epoch``
is given) and drops the previous one. Destroying a tf.data iterator waits for
its autotuning thread to stop, which can take most of a second (see
BENCHMARKS.md); in a multi-worker job every other worker then waits for that
one in its next collective. The wait does not hold the GIL (a worker keeps
training while a background thread destroys an iterator), so tfx_dist's
strategies mark the datasets they distribute (`reap_in_background`) and
their iterators, once garbage, are destroyed on one daemon thread (the
hand-over itself is in `tfx_dist._tf_compat.iterator_hand_over`). Horovod-style scripts
use no strategy: `tfx_dist.horovod.init` asks for the same with every eager
tf.data iterator of the process (`reap_dataset_iterators_in_background`): those
Keras makes every epoch and those a custom loop drops.
At exit, that thread is given time to finish before the interpreter shuts down.
"""

from __future__ import annotations

import atexit
import queue
import threading

from tfx_dist import _tf_compat as tfc

_EXIT_WAIT_S = 10.0

_lock = threading.Lock()
# SimpleQueue: its put() may run inside a garbage collection that interrupts
# another put() or get() of the same thread (queue.Queue would deadlock there).
_queue: queue.SimpleQueue | None = None


def reap_in_background(distributed) -> None:
    """Iterators made from `distributed` from now on are destroyed in the background."""
    _install()
    tfc.hand_over_dropped_iterators(distributed, _queue.put)


def reap_dataset_iterators_in_background() -> None:
    """Every eager tf.data iterator made from now on (Keras's, a custom loop's) is destroyed
    in the background once garbage (process-wide)."""
    _install()
    tfc.hand_over_dataset_iterators(_queue.put)


def wait_idle(timeout_s: float = _EXIT_WAIT_S) -> bool:
    """Waits until everything handed over so far is destroyed; False on timeout."""
    if _queue is None:
        return True
    reached = threading.Event()
    _queue.put(reached)  # one consumer, in order: all before it is done when it is reached
    return reached.wait(timeout_s)


def _reap_forever() -> None:
    while True:
        item = _queue.get()
        if isinstance(item, threading.Event):
            item.set()
            continue
        # Take each out of the handed-over list: the thread that handed it over may
        # still hold the list for a moment, but no longer what was in it.
        while item:
            item.pop()  # the last reference: a handed-over tf.data iterator is destroyed here


def _install() -> None:
    global _queue
    with _lock:
        if _queue is not None:
            return
        _queue = queue.SimpleQueue()
        threading.Thread(target=_reap_forever, name="tfx_iterator_reaper", daemon=True).start()
        atexit.register(wait_idle)
