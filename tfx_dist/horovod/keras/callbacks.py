"""Horovod's Keras callbacks, for Keras 3 (``hvd.callbacks``)."""

from __future__ import annotations

import keras
import numpy as np

from tfx_dist.horovod import basics, mpi_ops


class BroadcastGlobalVariablesCallback(keras.callbacks.Callback):
    """Starts every rank from rank ``root_rank``'s weights.

    At the start of training it broadcasts the model's variables (and the
    optimizer's, if built); at the end of the first batch, as Horovod does, it
    broadcasts the model's and the optimizer's variables again, since the
    optimizer creates its slots in the first step. ``local_variables`` (a
    variable or a list) are never broadcast: each rank keeps its own, as Horovod.
    """

    def __init__(self, root_rank, device="", local_variables=None):
        super().__init__()
        self.root_rank = root_rank
        self.broadcast_done = False
        if local_variables is None:
            local_variables = []
        elif not isinstance(local_variables, (list, tuple, set)):
            local_variables = [local_variables]
        # Variables each rank keeps its own (Horovod's local_variables): never broadcast.
        self._local_ids = {id(v) for v in local_variables}
        self._local_ids |= {id(v._value) for v in local_variables if getattr(v, "_value", None) is not None}

    def _broadcast(self):
        variables = list(self.model.variables)
        optimizer = getattr(self.model, "optimizer", None)
        if optimizer is not None and optimizer.built:
            variables += list(optimizer.variables)
        variables = [v for v in variables
                     if id(v) not in self._local_ids and id(getattr(v, "_value", v)) not in self._local_ids]
        mpi_ops.broadcast_variables(variables, self.root_rank)

    def on_train_begin(self, logs=None):
        self._broadcast()

    def on_batch_end(self, batch, logs=None):
        if self.broadcast_done:
            return
        self._broadcast()
        self.broadcast_done = True


class MetricAverageCallback(keras.callbacks.Callback):
    """Replaces each metric in the epoch's logs by its average over the ranks.

    Put it before the callbacks that read the metrics (checkpointing, early
    stopping, TensorBoard), as with Horovod.
    """

    def __init__(self, device=""):
        super().__init__()

    def on_epoch_end(self, epoch, logs=None):
        if not logs or basics.size() == 1:
            return
        names = sorted(k for k, v in logs.items() if np.ndim(v) == 0)
        values = np.array([float(logs[k]) for k in names], np.float64)
        (mean,) = basics.communicator().allreduce_numpy([values], reduction="mean",
                                                        name=f"hvd.metric_average.{epoch}")
        logs.update({k: float(v) for k, v in zip(names, mean)})


def _get_lr(optimizer) -> float:
    return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


class LearningRateScheduleCallback(keras.callbacks.Callback):
    """Sets the learning rate to ``initial_lr * multiplier(epoch)`` from ``start_epoch`` to ``end_epoch``.

    ``multiplier`` is a number or a function of the epoch. With
    ``staircase=True`` the rate changes at the start of each epoch; with
    ``staircase=False`` at each batch, the epoch then being fractional
    (``epoch + batch / steps_per_epoch``). A constant ``multiplier`` implies
    ``staircase=True``. ``momentum_correction`` is accepted and has no effect
    (Keras 3 traces an optimizer's momentum as a constant).
    """

    def __init__(self, initial_lr, multiplier, start_epoch=0, end_epoch=None, staircase=True,
                 momentum_correction=True, steps_per_epoch=None):
        super().__init__()
        self.initial_lr = initial_lr
        self.start_epoch, self.end_epoch = start_epoch, end_epoch
        self.staircase = staircase
        self.momentum_correction = momentum_correction
        self.steps_per_epoch = steps_per_epoch
        self.current_epoch = None
        if not callable(multiplier):
            self.staircase = True
            self.multiplier = lambda epoch: multiplier
        else:
            self.multiplier = multiplier

    def _adjust_learning_rate(self, epoch):
        self.model.optimizer.learning_rate = self.initial_lr * self.multiplier(epoch)

    def on_train_begin(self, logs=None):
        if self.initial_lr is None:
            self.initial_lr = _get_lr(self.model.optimizer)
        if not self.staircase and not self.steps_per_epoch:
            self.steps_per_epoch = self.params.get("steps")
            if not self.steps_per_epoch:
                raise ValueError("Could not autodetect the number of steps per epoch. Please "
                                 "specify the steps_per_epoch parameter to the callback.")

    def on_epoch_begin(self, epoch, logs=None):
        self.current_epoch = epoch

    def on_batch_begin(self, batch, logs=None):
        if (self.current_epoch < self.start_epoch
                or self.end_epoch is not None and self.current_epoch >= self.end_epoch):
            return
        if self.staircase and batch == 0:
            self._adjust_learning_rate(self.current_epoch)
        elif not self.staircase:
            self._adjust_learning_rate(self.current_epoch + float(batch) / self.steps_per_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = _get_lr(self.model.optimizer)


class LearningRateWarmupCallback(LearningRateScheduleCallback):
    """Raises the learning rate from ``initial_lr / size`` to ``initial_lr`` over ``warmup_epochs``.

    Horovod's gradual warmup (Goyal et al., "Accurate, Large Minibatch SGD"):
    at fractional epoch ``e`` the rate is
    ``initial_lr / size * (e * (size - 1) / warmup_epochs + 1)``, adjusted every
    batch, ``e`` counted at the end of the batch.
    """

    def __init__(self, initial_lr, warmup_epochs=5, momentum_correction=True, steps_per_epoch=None,
                 verbose=0):
        def multiplier(epoch):
            # Round numbers at the end of each epoch, as in Horovod.
            epoch += 1.0 / self.steps_per_epoch
            size = basics.size()
            return 1.0 / size * (epoch * (size - 1) / warmup_epochs + 1)

        super().__init__(initial_lr, multiplier, start_epoch=0, end_epoch=warmup_epochs,
                         staircase=False, momentum_correction=momentum_correction,
                         steps_per_epoch=steps_per_epoch)
        self.verbose = verbose

    def on_epoch_end(self, epoch, logs=None):
        super().on_epoch_end(epoch, logs)
        if epoch == self.end_epoch - 1 and self.verbose > 0:
            print(f"\nEpoch {epoch + 1}: finished gradual learning rate warmup to "
                  f"{_get_lr(self.model.optimizer):g}.")
