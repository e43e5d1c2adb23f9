"""After a reset, every traced ``tf.function`` is traced again, once.

A collective op records the id of the communicator it runs on, and a graph
may hold the number of workers (a mean's divisor) as a constant: a graph
traced before a reset would run on the closed communicator, or divide by the
old size. So a reset drops the traced graphs of every live ``tf.function``
(Keras's step functions and the user's): each retraces on its next call,
against the new communicator and size.
"""

from __future__ import annotations

import gc


def _clear(function) -> bool:
    # TensorFlow keeps a Function's traces in `_function_cache` (TF 2.16 to 2.21);
    # its public API has no way to drop them.
    cache = getattr(function, "_function_cache", None)
    if cache is None or not hasattr(cache, "clear"):
        return False
    cache.clear()
    return True


def after_reset(model=None) -> int:
    """Drops the traces of every live ``tf.function`` (and ``model``'s Keras step functions);
    returns how many functions will retrace."""
    import tensorflow as tf

    if model is not None:  # Keras makes its step functions again on the next fit/evaluate/predict
        for name in ("train_function", "test_function", "predict_function"):
            if hasattr(model, name):
                setattr(model, name, None)
    kind = tf.types.experimental.PolymorphicFunction
    cleared = sum(_clear(obj) for obj in gc.get_objects() if isinstance(obj, kind))
    return cleared
