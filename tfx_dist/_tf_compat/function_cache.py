"""Dropping the traces of a live ``tf.function``, so that its next call traces again.

Why: an elastic reset replaces the communicator a traced collective runs on
and the number of workers a mean divides by, and both are fixed in a
function's traced graphs (`tfx_dist.elastic.retrace`). TensorFlow has no
public way to make a live function trace again (``experimental_get_tracing_count``
only counts); its traces sit in the function's private ``_function_cache``
(TensorFlow 2.16 to 2.21), whose ``clear()`` this module calls.
"""

from __future__ import annotations


def drop_traces(function) -> bool:
    """Clears the traces of ``function`` (a ``tf.types.experimental.PolymorphicFunction``);
    False when it holds no cache of that kind (nothing was dropped)."""
    cache = getattr(function, "_function_cache", None)  # pylint: disable=protected-access
    if cache is None or not hasattr(cache, "clear"):
        return False
    cache.clear()
    return True
