"""A step function given to `strategy.run` that tfx_dist wraps: TensorFlow must still see what it is.

TensorFlow's ``mirrored_run.call_for_each_replica`` turns ``run(tf.function(f))``
into ``tf.function(run(f))``, keeping ``f``'s tf.function arguments: an
optimizer's gradient sum is a ``merge_call``, which cannot reach out of a
function graph traced inside one replica ("merge_call called while defining a
new graph or a tf.function"). It also applies AutoGraph to a plain ``f`` called
inside a tf.function. A strategy that wraps the step before TensorFlow sees it
(`tfx_dist.strategies.uneven_batches`) does both itself, with these functions.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfx_dist._tf_compat.imports import ag_ctx, def_function

# extended -> {tf.function: its lifted clone}, as TensorFlow caches its own.
_lifted: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def needs_lifting(fn, devices) -> bool:
    """Whether TensorFlow would trace ``fn`` around every replica rather than inside each one.

    It does for every tf.function except one compiled with XLA on GPUs only
    (collectives, no merge_call, in that case).
    """
    if not isinstance(fn, def_function.Function):
        return False
    jit_compile = fn._jit_compile  # pylint: disable=protected-access
    return not (jit_compile and all("GPU" in d.upper() for d in devices))


def lifted(fn, extended, call_for_each_replica):
    """A clone of tf.function ``fn`` (its arguments kept) whose body is
    ``call_for_each_replica(fn's Python function, args, kwargs)``, cached per ``extended``."""
    clones = _lifted.setdefault(extended, weakref.WeakKeyDictionary())
    clone = clones.get(fn)
    if clone is None:
        python_fn = fn.python_function
        if fn._autograph:  # pylint: disable=protected-access
            python_fn = tf.__internal__.autograph.tf_convert(
                python_fn, ag_ctx.ControlStatusCtx(status=ag_ctx.Status.ENABLED))

        @tf.autograph.experimental.do_not_convert
        def every_replica(*args, **kwargs):
            return call_for_each_replica(python_fn, args, kwargs)

        clone = fn._clone(python_function=every_replica)  # pylint: disable=protected-access
        clones[fn] = clone
    return clone


def converted_in_graph(fn):
    """``fn`` with AutoGraph applied as TensorFlow applies it to a step traced in a tf.function
    (per the caller's AutoGraph status); ``fn`` itself when running eagerly."""
    if tf.executing_eagerly():
        return fn
    return tf.__internal__.autograph.tf_convert(fn, tf.__internal__.autograph.control_status_ctx())
