"""After a reset, every traced ``tf.function`` is traced again, once.

A collective op records the id of the communicator it runs on, and a graph
may hold the number of workers (a mean's divisor) as a constant: a graph
traced before a reset would run on the closed communicator, or divide by the
old size. So a reset drops the traced graphs of every live ``tf.function``
(Keras's step functions and the user's): each retraces on its next call,
against the new communicator and size. And the counts that label Keras's
calls (`tfx_dist.comm.calls`) start again, as in a new process: a worker that
joined makes its first ``fit`` when the others make their next one.
"""

from __future__ import annotations

import gc


def after_reset(model=None) -> int:
    """Drops the traces of every live ``tf.function`` (and ``model``'s Keras step functions);
    returns how many functions will retrace."""
    import tensorflow as tf

    from tfx_dist._tf_compat import function_cache  # the private cache: see that module
    from tfx_dist.comm import calls

    if model is not None:  # Keras makes its step functions again on the next fit/evaluate/predict
        for name in ("train_function", "test_function", "predict_function"):
            if hasattr(model, name):
                setattr(model, name, None)
    # Keras's calls are labelled by their count in this process; a worker that joined counts from 1.
    calls.restart_counting()
    kind = tf.types.experimental.PolymorphicFunction
    cleared = sum(function_cache.drop_traces(obj) for obj in gc.get_objects() if isinstance(obj, kind))
    return cleared
