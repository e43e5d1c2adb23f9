"""The preemption notice: SIGTERM noted (not obeyed at once), with a bounded grace period.

Kubernetes, SLURM (``--signal=TERM@60``), Ray and cloud VMs send SIGTERM
before they take a node, and SIGKILL some time later (30 s on Kubernetes by
default). While a `PreemptionNotice` is installed, SIGTERM (and the other
signals it is given, e.g. SIGUSR1) only records that the notice came; the
training loop sees `received` at its next step boundary, agrees with the
other workers on where to stop, saves and exits with
``PREEMPTED_EXIT_CODE``. If that has not happened ``grace_s`` seconds after
the first signal (``TFX_PREEMPTION_GRACE_S``), the process exits by itself
with ``128 + signal``, as the signal would have made it: the previous
checkpoint is then the one to resume from (its writes are atomic, so an exit
in the middle of one leaves it intact). A second signal changes nothing.

Python runs signal handlers in the main thread, between bytecodes: a
handler here only sets a flag, so a step running in TensorFlow's C++ is
never interrupted by it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time

from tfx_dist import settings

_log = logging.getLogger("tfx_dist.fault_tolerance")


class PreemptionNotice:
    """Records the preemption signals of this process while installed.

    Args:
      signals: the signals that mean "preempted" (default SIGTERM).
      grace_s: seconds from the first signal to a forced exit (default
        ``TFX_PREEMPTION_GRACE_S``).
      then: what the process does on a notice (for the log).
    """

    def __init__(self, signals=(signal.SIGTERM,), grace_s: float | None = None,
                 then: str = "this worker saves at the next step boundary agreed with the others and exits"):
        self.signals = tuple(signals)
        self.then = then
        self.grace_s = settings.get("TFX_PREEMPTION_GRACE_S", grace_s)
        self._previous: dict = {}
        self._signum: int | None = None
        self._at: float | None = None
        self._timer: threading.Timer | None = None

    @property
    def received(self) -> bool:
        """Whether a preemption signal came since `install`."""
        return self._signum is not None

    @property
    def received_at(self) -> float | None:
        """When the first signal came (``time.monotonic()``), or None."""
        return self._at

    @property
    def signal_name(self) -> str:
        return signal.Signals(self._signum).name if self._signum is not None else ""

    def install(self) -> bool:
        """Starts noting the signals (main thread only; elsewhere returns False and does nothing)."""
        if threading.current_thread() is not threading.main_thread():
            _log.warning("preemption signals are only handled when training runs in the main thread")
            return False
        for sig in self.signals:
            if sig not in self._previous:
                self._previous[sig] = signal.signal(sig, self._handle)
        return True

    def uninstall(self) -> None:
        """Puts the previous handlers back and cancels the grace timer."""
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()
        self.done()

    def done(self) -> None:
        """The checkpoint is written: the grace timer is no longer needed."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _handle(self, signum, frame):
        if self._signum is not None:
            _log.warning("%s again: already stopping at the next step boundary (%.1f s since the first)",
                         signal.Signals(signum).name, time.monotonic() - self._at)
            return
        self._signum, self._at = signum, time.monotonic()
        _log.warning("%s: preemption notice; %s (at most %g s from now)", signal.Signals(signum).name,
                     self.then, self.grace_s)
        self._timer = threading.Timer(self.grace_s, self._grace_over)
        self._timer.daemon = True
        self._timer.start()

    def _grace_over(self):
        _log.error("%s came %g s ago (TFX_PREEMPTION_GRACE_S) and the save has not finished: exiting "
                   "now; the job resumes from the previous checkpoint", self.signal_name, self.grace_s)
        logging.shutdown()
        os._exit(128 + self._signum)


# The line a serving process writes when its notice comes; tfx-dist-run passes the notice on to
# every worker when a parameter server writes it (tfx_dist.launcher.status.PREEMPTION_NOTICE_LINE).
NOTICE_LINE = "tfx_dist: preemption notice:"


def serve_through_notice(what: str, grace_s: float | None = None) -> None:
    """For a process that serves the workers (a parameter server): SIGTERM does not end it at once.

    The workers save at the step they agree on, and the servers write their
    shards of the tables for that save: a server that died with the notice
    would take the checkpoint with it. So the server keeps serving until the
    workers have saved and said goodbye (then it exits as usual), or until
    ``grace_s`` (``TFX_PREEMPTION_GRACE_S``) has passed, whichever comes first.

    The server's main thread serves in C++, where Python runs no signal
    handler until it returns: a thread woken by the signal (Python's wakeup
    fd) starts the grace period and writes `NOTICE_LINE` on stderr at once.
    tfx-dist-run passes that on to every worker as SIGTERM, so a notice sent
    to a server alone stops the workers too (under another engine, signal
    the whole job: a Kubernetes pod or Slurm step is signalled as a whole).
    """
    notice = PreemptionNotice(grace_s=grace_s, then=f"{what} serves the workers until they have saved "
                              "and left (then exits)")
    if not notice.install():
        return
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    threading.Thread(target=_watch, args=(notice, read_fd, what), name="tfx-preemption-notice",
                     daemon=True).start()


def _watch(notice: PreemptionNotice, read_fd: int, what: str) -> None:
    wanted = {int(s) for s in notice.signals}
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        signums = [s for s in data if s in wanted]
        if signums and not notice.received:
            # The same as the handler would do, from this thread (the main one is in C++).
            notice._handle(signums[0], None)
            print(f"{NOTICE_LINE} {what} got {notice.signal_name}; the workers save and exit",
                  file=sys.stderr, flush=True)
