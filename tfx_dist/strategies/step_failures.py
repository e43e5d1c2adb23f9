"""A step that fails on one worker fails the job now, not at the timeout.

When a Keras step raises on one worker only (a bad record in its input, its
own out-of-memory), the other workers are already waiting in that step's
collectives. If the program catches the error and goes on, they would wait
until ``TFX_TIMEOUT_S``. So a multi-worker strategy told of a failed step
(`tfx_dist._tf_compat.keras_loop_steps`) closes this worker's connections: the
others fail within moments with an error naming this worker as lost, and this
worker's later collectives fail at once.

Which failures count is decided by type and by the communicator's state, not
by the error's text: only errors raised inside the step's graph
(``tf.errors.OpError``; an exception of a callback is Python's, and may be one
every worker raises on purpose) while this worker's communicator still works
(a failed collective broke it: the others know already, see
``Communicator.broken_code``), and not of the classes tfx_dist's ops report
when the job's connections failed (a timeout, an abort, a cancelled wait, a
lost peer: then too the others know; ranks that disagree on a collective all
fail at once).
"""

from __future__ import annotations

import sys

import tensorflow as tf

# What tfx_dist's collectives and service calls raise when the job's connections failed, or
# on every rank at once (ranks that disagree on a collective: FailedPrecondition).
_THE_OTHERS_KNOW = (tf.errors.DeadlineExceededError, tf.errors.AbortedError, tf.errors.CancelledError,
                    tf.errors.UnavailableError, tf.errors.FailedPreconditionError)


def fails_the_job(error: BaseException, communicator_broken: bool = False) -> bool:
    """Whether ``error``, raised by a step on this worker, leaves the others waiting.

    ``communicator_broken``: this worker's communicator failed already (its
    ``broken_code()`` is not 0), e.g. the step's collective lost a peer and
    TensorFlow re-raised that as another class.
    """
    if not isinstance(error, tf.errors.OpError) or communicator_broken:
        return False
    return not isinstance(error, _THE_OTHERS_KNOW)


def close_after_failed_step(error: BaseException, rank: int, close,
                            communicator_broken: bool = False) -> None:
    """Calls ``close`` (this worker's connections) if ``error`` leaves the others waiting."""
    if fails_the_job(error, communicator_broken):
        print(f"tfx_dist: a step failed on worker {rank} ({type(error).__name__}); closing its "
              "connections so that the other workers fail now instead of waiting for it until "
              "TFX_TIMEOUT_S.", file=sys.stderr, flush=True)
        close()
