"""`StepCheckpoint` under Ray Train: each save reported with ``ray.train.report``, each restart
resumed from ``ray.train.get_checkpoint()`` at the step.

Ray keeps the checkpoints (``RunConfig(storage_path=...)``, its retention and
``Result.checkpoint``); the workers need no shared file system. Every worker
works in a directory of its own: at `fit`'s start it fills it from the latest
checkpoint Ray holds (a restarted group: all workers get the same one), and
`tfx_dist.fault_tolerance.StepCheckpoint` restores from there and continues at
the step after it. At each save the chief reports the checkpoint it just
wrote; every worker calls ``ray.train.report`` (Ray Train wants them all).
"""

from __future__ import annotations

import os
import shutil
import tempfile

import ray.train

from tfx_dist.errors import AbortedError
from tfx_dist.fault_tolerance import PREEMPTED_EXIT_CODE, keras_callback
from tfx_dist.fault_tolerance.agreement import is_chief
from tfx_dist.fault_tolerance.checkpoint_dir import LATEST
from tfx_dist.ray import preemption


class StepCheckpoint(keras_callback.StepCheckpoint):
    """`tfx_dist.fault_tolerance.StepCheckpoint` whose checkpoints Ray Train keeps.

    Use it in the training function of a ``TensorflowTrainer``/`TfxTrainer` with
    ``RunConfig(failure_config=FailureConfig(max_failures=K))``::

        model.fit(x, y, batch_size=..., shuffle=False, epochs=...,
                  callbacks=[tfx_dist.ray.StepCheckpoint(save_freq=50)])

    ``Result.checkpoint`` is then a folder holding ``ckpt-<step>/`` and
    ``LATEST.json``: pass it (``checkpoint.to_directory()``) as the directory of a
    `tfx_dist.fault_tolerance.StepCheckpoint` to continue from it, or load it
    with ``tfx_dist.fault_tolerance`` tools.

    Args:
      directory: this worker's working folder (default: a fresh temporary folder).
      save_freq, **kwargs: as for `tfx_dist.fault_tolerance.StepCheckpoint`.
    """

    def __init__(self, directory: str | None = None, save_freq="epoch", **kwargs):
        directory = directory or tempfile.mkdtemp(prefix="tfx-ray-steps-")
        super().__init__(directory, save_freq=save_freq, **kwargs)
        if self._notice is not None:  # fed by the actor's main thread (the backend installs it)
            self._notice = preemption.ActorPreemptionNotice(
                self._notice.signals, then="this worker saves at the next step boundary agreed with the "
                "others, reports the checkpoint to Ray Train and stops; Ray Train restarts the group from it")

    def on_train_batch_end(self, batch, logs=None):
        try:
            super().on_train_batch_end(batch, logs)
        except SystemExit as stop:
            if stop.code != PREEMPTED_EXIT_CODE:
                raise
            # Saved and reported: stop once the controller holds the report, so that the restart
            # resumes from this step rather than from the save before.
            taken = preemption.wait_until_reported()
            raise AbortedError(
                f"tfx_dist.ray: preempted ({self._notice.signal_name or 'another worker'} received the "
                f"notice): saved step "
                f"{self._step} (epoch {self._epoch}, batch {self._step_in_epoch}) and reported it to Ray "
                f"Train{'' if taken else ' (not yet taken by its controller after 60 s)'}; the group stops "
                f"here and Ray Train restarts it from that step (RunConfig(failure_config=FailureConfig("
                f"max_failures=K)) counts this as one failure).") from None

    def on_train_begin(self, logs=None):
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is not None:
            checkpoint.to_directory(self._directory.path)
        super().on_train_begin(logs)

    def _save(self, epoch: int, step_in_epoch: int) -> None:
        super()._save(epoch, step_in_epoch)
        metrics = {"step": self._step, "epoch": epoch, "step_in_epoch": step_in_epoch}
        if not is_chief(self._strategy):
            ray.train.report(metrics)
            return
        saved = self._directory.latest()
        report_dir = tempfile.mkdtemp(prefix="tfx-ray-report-")
        try:  # the checkpoint and its LATEST.json alone (the folder keeps older ones too)
            shutil.copytree(saved.path, os.path.join(report_dir, os.path.basename(saved.path)))
            shutil.copy(os.path.join(self._directory.path, LATEST), report_dir)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(report_dir))
        finally:
            shutil.rmtree(report_dir, ignore_errors=True)
