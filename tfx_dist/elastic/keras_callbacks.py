"""Keras 3 and elastic training: the state of a ``model.fit`` and the callbacks that keep it.

``model.fit`` inside a ``tfx_dist.elastic.run`` function goes on through a
reset: the function is called again, ``fit`` resumes at the committed epoch
(``epochs=total - state.epoch``) and Keras traces its step function again,
once, for the new communicator and number of workers.

Put the callbacks in this order: ``UpdateEpochStateCallback``,
``UpdateBatchStateCallback``, ``CommitStateCallback``.
"""

from __future__ import annotations

import keras

from tfx_dist.elastic.state import TensorFlowKerasState


class KerasState(TensorFlowKerasState):
    """A Keras model's state with the counters of ``fit``: ``epoch`` and ``batch`` (0 unless given)."""

    def __init__(self, model, optimizer=None, backend=None, **kwargs):
        kwargs.setdefault("epoch", 0)
        kwargs.setdefault("batch", 0)
        super().__init__(model, optimizer=optimizer, backend=backend, **kwargs)


class CommitStateCallback(keras.callbacks.Callback):
    """Commits ``state`` every ``batches_per_commit`` batches and at the end of each epoch.

    A commit also checks for workers added or removed (``state.commit()``):
    every rank then stops ``fit`` at the same batch and resets.

    Under parameter servers (their tables are not rolled back) commit every
    batch, and put callbacks that talk to the other workers after this one: a
    step the servers applied must be in the survivors' commit.
    """

    def __init__(self, state, batches_per_commit: int = 1):
        super().__init__()
        if batches_per_commit < 1:
            raise ValueError(f"Expected batches_per_commit >= 1. Received: {batches_per_commit}")
        self.state = state
        self.batches_per_commit = int(batches_per_commit)
        self._since_commit = 0

    def on_train_begin(self, logs=None):
        self._since_commit = 0

    def on_train_batch_end(self, batch, logs=None):
        self._since_commit += 1
        if self._since_commit >= self.batches_per_commit:
            self._since_commit = 0
            self.state.commit()

    def on_epoch_end(self, epoch, logs=None):
        self._since_commit = 0
        self.state.commit()


class UpdateBatchStateCallback(keras.callbacks.Callback):
    """Keeps ``state.batch``: the batches of the current epoch done (0 at an epoch's end).

    A ``fit`` called again after a reset starts its first epoch at batch
    ``state.batch``: the progress bar counts the steps left in the epoch.
    """

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._offset = 0
        self._steps_per_epoch = None

    def on_epoch_begin(self, epoch, logs=None):
        self._offset = self.state.batch
        steps = self.params.get("steps") if self.params else None
        if steps:
            if self._steps_per_epoch is None:
                self._steps_per_epoch = steps
            self.params["steps"] = max(self._steps_per_epoch - self._offset, 1)

    def on_train_batch_end(self, batch, logs=None):
        self.state.batch = self._offset + batch + 1

    def on_epoch_end(self, epoch, logs=None):
        self.state.batch = 0
        self._offset = 0
        if self._steps_per_epoch is not None and self.params:
            self.params["steps"] = self._steps_per_epoch


class UpdateEpochStateCallback(keras.callbacks.Callback):
    """Keeps ``state.epoch``: the epochs done, counted across the calls of ``fit`` after resets."""

    def __init__(self, state):
        super().__init__()
        self.state = state
        self._initial_epoch = state.epoch

    def on_train_begin(self, logs=None):
        self._initial_epoch = self.state.epoch

    def on_epoch_end(self, epoch, logs=None):
        self.state.epoch = self._initial_epoch + epoch + 1


class UpdateSamplerCallback(keras.callbacks.Callback):
    """Advances ``state.sampler`` (an `ElasticSampler`) by one step of the job at each batch's end,
    so a commit records how much of the epoch every rank together has consumed."""

    def __init__(self, state, batch_size: int):
        super().__init__()
        self.state, self.batch_size = state, int(batch_size)

    def on_train_batch_end(self, batch, logs=None):
        from tfx_dist.elastic.state import communicator

        comm = communicator()
        self.state.sampler.record_batch(self.batch_size, 1 if comm is None else comm.size)
