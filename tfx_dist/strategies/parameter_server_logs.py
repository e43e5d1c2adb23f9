"""In an elastic parameter-server job, Keras's logs of a training step are reduced across the
workers before the step ends on the servers.

Keras 3's train function is ``strategy.run(model.train_step)`` followed by
``strategy.reduce("MEAN", log, axis=0)`` for each log: an all-reduce among the
workers under a multi-worker strategy. The servers apply a step once any worker
ended it, and a survivor of a lost worker restores its last commit, which
``CommitStateCallback`` makes after the train function returns. With the step
ended before the logs' all-reduce, a worker lost between the two leaves the
step applied on the servers and missing from the survivors' commit: they run it
again, and its table updates are applied twice. So here the logs are reduced
inside ``run``, before the step's end, and Keras's own ``reduce`` of those values
gets these results (no second all-reduce).
"""

from __future__ import annotations

import tensorflow as tf

_MEAN = tf.distribute.ReduceOp.MEAN


def is_keras_train_step(fn) -> bool:
    """Whether ``fn`` (given to ``Strategy.run``) is a Keras model's ``train_step``."""
    import keras

    owner = getattr(fn, "__self__", None)
    return getattr(fn, "__name__", "") == "train_step" and isinstance(owner, keras.Model)


class ReducedLogs:
    """The logs of the last step traced, reduced as Keras will ask for them."""

    def __init__(self):
        self._reduced: dict[int, tuple] = {}  # id(log) -> (log, its reduction): the log kept alive

    def reduce_now(self, strategy, logs) -> list:
        """Reduces each of ``logs`` (the outputs of ``train_step``) with ``strategy.reduce``, as
        Keras does; returns their tensors, for the step's end to wait on."""
        self._reduced = {}
        for log in tf.nest.flatten(logs):
            if isinstance(log, (tf.Tensor, tf.distribute.DistributedValues)):
                self._reduced[id(log)] = (log, strategy.reduce(_MEAN, log, axis=0))
        return [t for _, reduced in self._reduced.values() for t in tf.nest.flatten(reduced)
                if isinstance(t, tf.Tensor)]

    def get(self, reduce_op, value, axis):
        """The reduction made by `reduce_now` of ``value``, if Keras asks for that one (once: the
        graph it belongs to is then let go); else None."""
        kept = self._reduced.get(id(value))
        if kept is None or kept[0] is not value or axis != 0:
            return None
        if (tf.distribute.ReduceOp(reduce_op) if isinstance(reduce_op, str) else reduce_op) != _MEAN:
            return None
        del self._reduced[id(value)]
        return kept[1]
