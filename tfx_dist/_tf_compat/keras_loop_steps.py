"""Keras's loops tell the strategy how many steps they will run, and when a step failed.

Replaces ``TFEpochIterator.__init__`` (``keras.src.backend.tensorflow.trainer``):
once Keras has distributed the dataset of a ``fit``, ``evaluate`` or
``predict`` call, a strategy whose extended has ``check_same_step_count`` (the
multi-worker ones) receives the loop's number of batches (known for NumPy
input and datasets of known cardinality, else None). Workers fed inputs of
different lengths then fail at once, together, instead of the longer one
waiting at its extra step's collective until the timeout
(`tfx_dist.input.step_counts`).

And ``TFEpochIterator.catch_stop_iteration``, the context each of Keras's
loops runs its steps in: an error escaping it goes to the strategy's
``step_failed`` (if any) before it propagates, so that a step failing on one
worker fails the others now (`tfx_dist.strategies.step_failures`).
"""

from __future__ import annotations

import contextlib


def _extended_hook(epoch_iterator, name):
    strategy = getattr(epoch_iterator, "_distribute_strategy", None)
    return getattr(getattr(strategy, "extended", None), name, None)


def install() -> None:
    from keras.src.backend.tensorflow import trainer  # pylint: disable=import-outside-toplevel

    epoch_iterator = trainer.TFEpochIterator
    init = epoch_iterator.__init__

    def init_and_check_steps(self, distribute_strategy=None, *args, **kwargs):
        init(self, distribute_strategy, *args, **kwargs)
        check = _extended_hook(self, "check_same_step_count")
        if check is not None:
            check(self.num_batches)

    catch_stop_iteration = epoch_iterator.catch_stop_iteration

    @contextlib.contextmanager
    def catch_stop_iteration_and_failures(self):
        try:
            with catch_stop_iteration(self):
                yield
        except Exception as e:
            step_failed = _extended_hook(self, "step_failed")
            if step_failed is not None:
                step_failed(e)
            raise

    epoch_iterator.__init__ = init_and_check_steps
    epoch_iterator.catch_stop_iteration = catch_stop_iteration_and_failures
