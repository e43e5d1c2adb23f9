"""SIGTERM in a Ray Train worker: a preemption notice that `StepCheckpoint` sees at its next batch.

Ray Train runs the training function in a thread of the worker actor, and
Python installs signal handlers from the main thread only, so the notice of
`tfx_dist.fault_tolerance.StepCheckpoint` cannot install itself there. The
actor's main thread runs Ray's task loop, which executes the actor's tasks
(the backend's, before training starts) and lets Python's handlers run. So the
backend installs, with one such task, a SIGTERM handler that hands the signal
to the notice of the `StepCheckpoint` in `fit` at that moment, if any, and
otherwise to the handler it replaced (Ray's: the process exits).
"""

from __future__ import annotations

import signal
import threading
import time

from tfx_dist.fault_tolerance.notice import PreemptionNotice

_installed: dict = {}          # signal -> the handler this one replaced
_active: list = []             # the notice of the StepCheckpoint in fit (at most one)


def install_in_actor(signals=(signal.SIGTERM,)) -> bool:
    """Runs in a worker actor's main thread (a task of the backend); idempotent."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for sig in signals:
        if sig not in _installed:
            _installed[sig] = signal.signal(sig, _handle)
    return True


def _handle(signum, frame):
    if _active:
        _active[-1]._handle(signum, frame)
        return
    previous = _installed.get(signum)
    if callable(previous):
        previous(signum, frame)
    elif previous == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)


class ActorPreemptionNotice(PreemptionNotice):
    """A `PreemptionNotice` fed by the actor's main-thread handler while `fit` runs.

    Outside a Ray worker actor (no handler installed) it is the plain notice.
    """

    def install(self) -> bool:
        if not all(sig in _installed for sig in self.signals):
            return super().install()
        if self not in _active:
            _active.append(self)
        return True

    def uninstall(self) -> None:
        if self in _active:
            _active.remove(self)
        super().uninstall()


def wait_until_reported(timeout_s: float = 60.0) -> bool:
    """Waits until Ray Train's controller has taken this worker's last ``ray.train.report``.

    The controller polls each worker for its reports; a worker that stops right after
    reporting could fail the group before the report is taken, and the restart would
    resume from the checkpoint before. Returns False when it was not taken in time.
    """
    try:
        from ray.train.v2._internal.execution.context import get_train_context

        reports = get_train_context().execution_context.result_queue
    except Exception:  # noqa: BLE001  (another Ray Train: nothing to wait for)
        return True
    deadline = time.monotonic() + timeout_s
    while reports.unfinished_tasks:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
