"""Two Keras 2 names Horovod's elastic examples use, accepted on Keras 3 (installed once, on import
of ``tfx_dist.horovod.keras`` or ``hvd.elastic``):

- ``optimizer.lr``: Keras 2's name of ``optimizer.learning_rate`` (the reset callbacks scale it);
- ``model.compile(experimental_run_tf_function=False)``: Keras 2's switch, with no meaning in Keras
  3 (its ``fit`` always applies the optimizer given); dropped.
Any other argument Keras 3 does not know is still refused by Keras.
"""

from __future__ import annotations

import functools

_installed = False


def _lr(optimizer):
    # The TensorFlow variable under Keras's: `tf.keras.backend.set_value(opt.lr, x)` (Keras 2's
    # idiom) reads a TensorFlow dtype; `opt.lr.assign(x)` works on either.
    rate = optimizer.learning_rate
    return getattr(rate, "value", rate)


def install() -> None:
    global _installed
    if _installed:
        return
    import keras

    if not hasattr(keras.optimizers.Optimizer, "lr"):
        keras.optimizers.Optimizer.lr = property(
            _lr, lambda self, value: setattr(self, "learning_rate", value))
    # Replaced on every class of keras.Model's that holds Keras's compile (keras.Model and its
    # trainer), with one function: Keras's loading skips compiling a model whose class's compile
    # differs from the trainer's, which would lose the loss of every `.keras` file loaded later.
    compile_ = keras.Model.compile
    owners = [c for c in keras.Model.__mro__ if vars(c).get("compile") is compile_]

    @functools.wraps(compile_)
    def compile(self, *args, experimental_run_tf_function=None, **kwargs):
        return compile_(self, *args, **kwargs)

    for owner in owners:
        owner.compile = compile
    _installed = True
