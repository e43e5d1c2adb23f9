"""`AsyncStepCheckpoint`: `StepCheckpoint` whose periodic saves are written while training goes on.

A periodic save costs the training loop only a copy of the model's state to
host memory (the weights, slots and seeds as NumPy arrays, taken at the step
boundary, so the checkpoint is exactly that step); writing, fsync, the
SHA-256 manifest, the rename and ``LATEST.json`` run on a background thread
of the chief. The commit is the same as a synchronous save's, so a process
killed mid-write leaves ``LATEST.json`` naming the previous complete
checkpoint: a kill then costs the steps since that one (at most two
``save_freq`` intervals, against one for synchronous saves).

Kept synchronous, for what must be on disk before going on:
* the save on a preemption notice (the workers exit right after it): it
  first waits for a write in flight;
* models with `ShardedEmbedding` tables (every worker writes its shard
  through the tables' own checkpoint path, with collectives).
At most one write is in flight: the next save, and the end of `fit`, wait
for it; a failed write raises there.
"""

from __future__ import annotations

import threading

import numpy as np

from tfx_dist.fault_tolerance import dense_state
from tfx_dist.fault_tolerance.agreement import is_chief
from tfx_dist.fault_tolerance.keras_callback import StepCheckpoint, _num_servers


class _Snapshot:
    """A variable's value at the save's step, with what the layout records of it."""

    def __init__(self, variable):
        self.path = getattr(variable, "path", None) or variable.name
        self.shape = variable.shape
        self.dtype = variable.dtype
        self._value = np.array(variable.numpy())  # a copy: training goes on updating the variable

    def numpy(self):
        return self._value


class AsyncStepCheckpoint(StepCheckpoint):
    """`StepCheckpoint` with the periodic saves written on a background thread (same arguments)."""

    def on_train_begin(self, logs=None):
        self._writer, self._write_error, self._stopping = None, None, False
        super().on_train_begin(logs)
        agreed = self._agreement.should_stop

        def should_stop(noticed: bool) -> bool:  # remembered: the save after it must be on disk
            self._stopping = agreed(noticed)
            return self._stopping

        self._agreement.should_stop = should_stop

    def _save(self, epoch: int, step_in_epoch: int) -> None:
        self.wait_for_write()
        if self._stopping or self._tables is not None:
            super()._save(epoch, step_in_epoch)
            return
        if not is_chief(self._strategy):
            return  # the chief writes alone: nothing to wait for (the rename publishes it)
        snapshot = [_Snapshot(v) for v in self._variables]
        meta = dict(step=self._step, epoch=epoch, step_in_epoch=step_in_epoch,
                    num_workers=self._agreement.num_workers, num_ps=_num_servers(self._strategy),
                    extra={"steps_per_epoch": (self.params or {}).get("steps")})
        self._writer = threading.Thread(target=self._write, args=(snapshot, meta),
                                        name="tfx-async-checkpoint", daemon=True)
        self._writer.start()

    def _write(self, snapshot, meta) -> None:
        try:
            folder = self._directory.begin(meta["step"])
            dense_state.save(snapshot, folder)
            self._directory.commit(folder, **meta)
        except BaseException as e:  # raised in the training thread by wait_for_write
            self._write_error = e

    def wait_for_write(self) -> None:
        """Returns once the write in flight (if any) is committed; raises its error if it failed."""
        writer, self._writer = getattr(self, "_writer", None), None
        if writer is not None:
            writer.join()
        error, self._write_error = getattr(self, "_write_error", None), None
        if error is not None:
            raise RuntimeError(f"the asynchronous checkpoint write failed: {error}") from error

    def on_train_end(self, logs=None):
        self.wait_for_write()
        super().on_train_end(logs)
