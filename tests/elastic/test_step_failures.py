"""A failed step is classified by its type and the communicator's state, not by its text."""

import tensorflow as tf

from tfx_dist.strategies import step_failures


def _error(cls, node="model/dense/MatMul"):
    return cls(None, None, f"bad input\n\t [[{{{{node {node}}}}}]]\nDetected at node {node}")


def test_a_step_error_of_this_worker_closes_whatever_its_node_is_called():
    # The user's own op whose name contains "Tfx" (the text the old rule looked for) is still
    # this worker's failure: the others would wait for it until the timeout.
    assert step_failures.fails_the_job(_error(tf.errors.InvalidArgumentError, node="parse/TfxLabels"))
    assert step_failures.fails_the_job(_error(tf.errors.ResourceExhaustedError))
    # A message that happens to say "tfx_dist rank" does not change its class.
    assert step_failures.fails_the_job(tf.errors.InvalidArgumentError(None, None, "tfx_dist rank 3 of data"))


def test_failures_the_others_know_of_do_not_close():
    # A collective that lost a peer broke the communicator: TensorFlow may re-raise it as an
    # InternalError, the state says what happened.
    assert not step_failures.fails_the_job(_error(tf.errors.InternalError), communicator_broken=True)
    for cls in (tf.errors.UnavailableError, tf.errors.DeadlineExceededError, tf.errors.AbortedError,
                tf.errors.CancelledError, tf.errors.FailedPreconditionError):
        assert not step_failures.fails_the_job(_error(cls))
    assert not step_failures.fails_the_job(ValueError("a callback's error"))
