"""Ctrl-C while a collective waits stops it at once, not after ``TFX_TIMEOUT_S``.

A process blocked in a collective is inside C++ (the numpy path in ctypes,
the TF ops in TensorFlow's executor), where Python's SIGINT handler only sets
a flag read after the call returns: without help, after ``TFX_TIMEOUT_S``.
The runtime's hook (``custom_ops/comm/core/interrupt.h``) sits in front of
Python's: it fails what waits and tells the peers (their collectives fail
naming this rank). The call returns at once with that error, which the
wrappers (``Communicator``'s numpy calls, ``tfx_dist.comm.ops`` in eager
mode) raise as KeyboardInterrupt naming the rank, the collective and, on
rank 0, who had not arrived. A collective inside a ``tf.function`` raises
``tf.errors.CancelledError`` with that message; if the program still runs
10 ms later, the handler installed here raises KeyboardInterrupt with it
(not at once: see ``_raise_keyboard_interrupt``).
"""

from __future__ import annotations

import _thread
import ctypes
import signal
import threading

from tfx_dist.comm import _native


def install() -> bool:
    """Puts the hook in place (again: a later ``signal.signal(SIGINT, ...)``
    replaces it). Returns False where SIGINT is ignored or kills the process."""
    if threading.current_thread() is threading.main_thread():
        # Only the default handler is replaced: a program's own one is its business.
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            signal.signal(signal.SIGINT, _raise_keyboard_interrupt)
    # After signal.signal, which puts Python's C-level handler back.
    return bool(_native.lib().tfx_comm_install_interrupt_hook())


def take_message() -> str:
    """What the latest SIGINT interrupted ("" if no collective since the
    last call). A caller that gets a message raises KeyboardInterrupt with
    it, and the handler then raises nothing more for that signal."""
    global _deferred
    if _deferred is not None:
        message, _deferred = _deferred, None
        return message
    out = ctypes.create_string_buffer(_native.ERR_LEN)
    _native.lib().tfx_comm_take_interrupt_message(out, _native.ERR_LEN)
    return out.value.decode("utf-8", "replace")


# The message of an interrupted collective whose KeyboardInterrupt the
# handler put off, and whether the handler's next run is the second look.
_deferred: str | None = None
_second_look = False
_SECOND_LOOK_S = 0.01


def _raise_keyboard_interrupt(signum, frame):
    """signal.default_int_handler, with the interrupted collective named.

    Python runs it at its first chance, which for an interrupted collective
    is often inside TensorFlow's C++, while pybind11 builds the failed call's
    exception: an exception raised there comes out as "pybind11::
    error_already_set: MISMATCH of original and normalized active exception
    types". So for a collective it only keeps the message: the wrappers
    raise KeyboardInterrupt with it as the error reaches them, and if none
    did (a collective inside a tf.function), a second look 10 ms later
    raises it, once the call has returned.
    """
    global _deferred, _second_look
    if _second_look:
        _second_look = False
        if _deferred is None:
            return  # a wrapper raised it meanwhile
        message, _deferred = _deferred, None
        raise KeyboardInterrupt(message)
    message = take_message()
    if not message:
        raise KeyboardInterrupt()
    _deferred = message
    timer = threading.Timer(_SECOND_LOOK_S, _look_again)
    timer.daemon = True
    timer.start()


def _look_again():
    global _second_look
    if _deferred is not None:
        _second_look = True
        _thread.interrupt_main()
