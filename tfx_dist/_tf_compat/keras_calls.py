"""Keras's fit / evaluate / predict labelled as calls, so that collectives never pair across calls.

Wraps ``keras.src.backend.tensorflow.trainer.TensorFlowTrainer.fit`` (``Trainer`` from Keras 3.16),
``evaluate`` and ``predict`` (private: Keras 3's TensorFlow trainer, tested
with Keras 3.15): a call of a model whose strategy was registered here (a
multi-worker tfx_dist strategy) runs inside ``tfx_dist.comm.calls.call``,
which labels the collectives it submits (see that module for why). Models of
other strategies, or none, are not counted: a rank may make such calls alone.
"""

from __future__ import annotations

import functools
import threading
import weakref

from tfx_dist._tf_compat.keras_trainer import tensorflow_trainer_class

_KINDS = {"fit": "fit", "evaluate": "evaluate", "predict": "predict"}
_lock = threading.Lock()
_strategies: "weakref.WeakSet" = weakref.WeakSet()
_installed = False


def _labelled(method, kind):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        strategy = getattr(self, "_distribute_strategy", None)
        if strategy is None or strategy not in _strategies:
            return method(self, *args, **kwargs)
        from tfx_dist.comm import calls  # late: loads the collective runtime

        with calls.call(kind):
            return method(self, *args, **kwargs)
    wrapper._tfx_labelled = True
    return wrapper


def install(strategy) -> None:
    """Counts the calls of models under ``strategy`` (installs the wrappers once)."""
    global _installed
    with _lock:
        _strategies.add(strategy)
        if _installed:
            return
        trainer = tensorflow_trainer_class()
        for name, kind in _KINDS.items():
            method = getattr(trainer, name)
            if not getattr(method, "_tfx_labelled", False):
                setattr(trainer, name, _labelled(method, kind))
        _installed = True
