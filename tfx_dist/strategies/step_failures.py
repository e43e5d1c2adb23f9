"""A step that fails on one worker fails the job now, not at the timeout.

When a Keras step raises on one worker only (a bad record in its input, its
own out-of-memory), the other workers are already waiting in that step's
collectives. If the program catches the error and goes on, they would wait
until ``TFX_TIMEOUT_S``. So a multi-worker strategy told of a failed step
(`tfx_dist._tf_compat.keras_loop_steps`) closes this worker's connections: the
others fail within moments with an error naming this worker as lost, and this
worker's later collectives fail at once. Only errors raised inside the step's
graph by something other than tfx_dist's own ops count: a failed collective
or parameter-server call means the others know already, and an exception of
a callback (Python) may be one every worker raises on purpose.
"""

from __future__ import annotations

import re
import sys

import tensorflow as tf

# The node an error was "Detected at" is one of tfx_dist's ops (collectives, tables).
_TFX_NODE = re.compile(r"Detected at node \S*Tfx")


def fails_the_job(error: BaseException) -> bool:
    """Whether ``error``, raised by a step on this worker, leaves the others waiting."""
    if not isinstance(error, tf.errors.OpError):
        return False
    message = str(error)
    return not (_TFX_NODE.search(message) or "tfx_dist rank" in message)


def close_after_failed_step(error: BaseException, rank: int, close) -> None:
    """Calls ``close`` (this worker's connections) if ``error`` leaves the others waiting."""
    if fails_the_job(error):
        print(f"tfx_dist: a step failed on worker {rank} ({type(error).__name__}); closing its "
              "connections so that the other workers fail now instead of waiting for it until "
              "TFX_TIMEOUT_S.", file=sys.stderr, flush=True)
        close()
