"""`StepCheckpoint`: a Keras callback that saves steps and resumes at the next one.

Saves every ``save_freq`` steps (or at each epoch's end) and when a
preemption notice comes (then exits with ``PREEMPTED_EXIT_CODE``); a rerun
of the same program restores the latest complete checkpoint when `fit`
starts and continues at the step after it:

* the weights, the optimizer's slots and iteration count (hence a
  learning-rate schedule's step), the model's seed generators (dropout
  masks) come back (`dense_state`);
* `fit` starts at the saved epoch (``initial_epoch``) and the batches the
  saved run already trained on in that epoch are read and dropped, not
  trained on: no batch is seen twice, none is skipped, as long as the input
  yields the same batches in the same order in every run. That holds for
  NumPy arrays and tensors, shuffled by Keras (``shuffle=True``) or not,
  under tfx_dist's multi-worker strategies (each epoch's order is a function
  of a seed the checkpoint keeps and of the epoch: `array_order`), and for a
  `tf.data.Dataset` without shuffling, with a shuffle that does not reshuffle,
  or with a seeded one that does (the resume makes and drops as many
  iterators as `fit` made before the saved epoch, which advances its seeds
  as the saved run did).
  An unseeded reshuffling dataset resumes in another order: a warning says
  so, once.

`tfx_dist.layers.ShardedEmbedding` tables (on the workers or on parameter
servers) are saved with their slots by their own checkpoint path
(`table_state`). The checkpoint holds no per-worker state: it resumes on
another number of workers (and servers) when the global batch size is the
same (the steps per epoch are checked, an error says if they differ). Only
``steps_per_execution=1``.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal

import keras

from tfx_dist import settings
from tfx_dist.fault_tolerance import PREEMPTED_EXIT_CODE
from tfx_dist.fault_tolerance import dense_state, table_state
from tfx_dist.fault_tolerance.agreement import StopAgreement, is_chief, rank_of, wait_for_everyone
from tfx_dist.fault_tolerance.checkpoint_dir import CheckpointDir
from tfx_dist.fault_tolerance.notice import PreemptionNotice
from tfx_dist.input import array_order

_log = logging.getLogger("tfx_dist.fault_tolerance")
_warned_reshuffling = [False]  # the warning below: once per process


class StepCheckpoint(keras.callbacks.Callback):
    """Step-exact checkpoints of a Keras `fit`, and a clean stop on a preemption notice.

    Use it on every worker (the chief writes, all read), with a directory
    every worker sees:
    ```python
    model.fit(x, y, batch_size=64, epochs=10, shuffle=False,
              callbacks=[tfx_dist.fault_tolerance.StepCheckpoint("/shared/ckpt", save_freq=100)])
    ```
    Killed (SIGKILL, a lost node), a rerun repeats at most ``save_freq``
    steps; preempted (SIGTERM), it repeats none.

    Args:
      directory: the checkpoint directory (default ``TFX_CHECKPOINT_DIR``).
      save_freq: ``"epoch"`` (at each epoch's end) or a number of steps.
      preemption: handle SIGTERM (and ``preemption_signals``) as a preemption notice.
      delete_at_end: delete the directory when `fit` ends normally.
      preemption_signals: the signals that mean "preempted".
    """

    def __init__(self, directory: str | None = None, save_freq="epoch", preemption: bool = True,
                 delete_at_end: bool = False, preemption_signals=(signal.SIGTERM,)):
        keras.callbacks.Callback.__init__(self)  # not super(): BackupAndRestore also derives from Keras's
        if save_freq != "epoch" and not (isinstance(save_freq, int) and save_freq > 0):
            raise ValueError(f"save_freq must be 'epoch' or a positive number of steps. Received: "
                             f"{save_freq!r}")
        self._directory = CheckpointDir(directory or settings.get("TFX_CHECKPOINT_DIR"))
        self._save_freq = save_freq
        self._delete_at_end = delete_at_end
        self._notice = PreemptionNotice(preemption_signals) if preemption else None
        self._original_train_function = None

    # -- fit's start: restore --------------------------------------------------------------

    def on_train_begin(self, logs=None):
        model = self.model
        if int(getattr(model, "steps_per_execution", 1) or 1) != 1:
            raise ValueError("StepCheckpoint resumes step by step: compile with steps_per_execution=1.")
        self._strategy = model.distribute_strategy
        self._tables = table_state.tables_of(model)
        self._agreement = StopAgreement(self._strategy)
        _build_optimizer(model)
        self._variables = dense_state.model_variables(model)
        self._step, self._epoch, self._step_in_epoch, self._to_skip = 0, 0, 0, 0
        self._skipping = False
        self._input_order = array_order.latest_order()  # fit's shuffled arrays, if they are
        self._reshuffles = array_order.latest_reshuffles()
        if self._reshuffles == "unseeded" and not _warned_reshuffling[0]:
            _warned_reshuffling[0] = True
            _log.warning("the training dataset reshuffles each iteration without a seed (shuffle(..., "
                         "reshuffle_each_iteration=True), no seed and no tf.random.set_seed): a resumed "
                         "run shuffles its epoch in another order than the interrupted run did, so some "
                         "examples of that epoch are trained twice and others not at all; give the "
                         "shuffle a seed (or call keras.utils.set_random_seed first) for a step-exact "
                         "resume")
        self._restore_latest()
        if self._notice is not None:
            self._notice.install()

    def _restore_latest(self) -> None:
        checkpoint = self._directory.latest()
        if checkpoint is not None:
            self._restore(checkpoint)

    def _restore(self, checkpoint):
        steps = self.params.get("steps") if self.params else None
        saved_steps = checkpoint.extra.get("steps_per_epoch")
        if steps and saved_steps and checkpoint.step_in_epoch and steps != saved_steps:
            raise dense_state.CheckpointMismatchError(
                f"The checkpoint {checkpoint.path} stopped at batch {checkpoint.step_in_epoch} of an "
                f"epoch of {saved_steps} steps; this run's epochs have {steps} steps: the data or the "
                f"global batch size changed (keep fit's batch_size, the global batch, when the number "
                f"of workers changes), so its input position cannot be continued.")
        dense_state.restore(self._variables, checkpoint.path)
        seed = checkpoint.extra.get("input_seed")
        if self._input_order is not None and seed is not None:
            self._input_order.seed = int(seed)  # the saved run's orders
        if self._tables is not None:
            self._tables.restore(checkpoint.path)
        if self._input_order is not None or self._reshuffles == "seeded":
            # Its next iterator shuffles as the saved epoch's did: as many made before it.
            array_order.skip_iterators(checkpoint.epoch * _iterators_per_epoch(steps))
        self._step, self._epoch = checkpoint.step, checkpoint.epoch
        self._to_skip = checkpoint.step_in_epoch
        self.model._initial_epoch = checkpoint.epoch
        _log.warning("resumed from %s (saved on %d worker(s)): epoch %d, after batch %d of it, step %d",
                     checkpoint.path, checkpoint.num_workers, checkpoint.epoch, checkpoint.step_in_epoch,
                     checkpoint.step)
        if self._to_skip:
            self._original_train_function = self.model.train_function
            self.model.train_function = self._train_or_skip

    def _train_or_skip(self, iterator):
        """Keras's train function, except that it drops the batches trained on before the save."""
        if self._to_skip > 0:
            next(iterator)
            self._to_skip -= 1
            self._skipping = True
            return {}
        self._skipping = False
        return self._original_train_function(iterator)

    # -- during fit: save and stop ---------------------------------------------------------

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self._skipping:
            self._skipping = False
            return  # a batch the saved run trained on
        self._step += 1
        self._step_in_epoch = batch + 1
        noticed = self._notice is not None and self._notice.received
        if self._agreement.should_stop(noticed):
            self._save(self._epoch, self._step_in_epoch)
            self._notice.done() if self._notice is not None else None
            _log.warning("preempted: saved step %d (epoch %d, batch %d); exiting with %d",
                         self._step, self._epoch, self._step_in_epoch, PREEMPTED_EXIT_CODE)
            raise SystemExit(PREEMPTED_EXIT_CODE)
        if self._save_freq != "epoch" and self._step % self._save_freq == 0:
            self._save(self._epoch, self._step_in_epoch)

    def on_epoch_end(self, epoch, logs=None):
        if self._save_freq == "epoch":
            self._save(epoch + 1, 0)

    def _save(self, epoch: int, step_in_epoch: int) -> None:
        chief = is_chief(self._strategy)
        folder = self._directory.begin(self._step) if chief else self._directory.staging(self._step)
        if self._tables is not None:  # every worker writes its shard into the chief's folder
            wait_for_everyone(self._strategy, name="tfx.fault_tolerance.staged")
            self._tables.save(folder, chief, rank_of(self._strategy))
        if chief:
            dense_state.save(self._variables, folder)
            self._directory.commit(folder, step=self._step, epoch=epoch, step_in_epoch=step_in_epoch,
                                   num_workers=self._agreement.num_workers,
                                   num_ps=_num_servers(self._strategy),
                                   extra={"steps_per_epoch": (self.params or {}).get("steps"),
                                          "input_seed": getattr(self._input_order, "seed", None)})
        wait_for_everyone(self._strategy)  # the chief's files are complete on every worker's return

    # -- fit's end ---------------------------------------------------------------------------

    def on_train_end(self, logs=None):
        if self._original_train_function is not None:
            self.model.train_function = self._original_train_function
            self._original_train_function = None
        if self._notice is not None:
            late = self._notice.received  # after the last step's check: training is done anyway
            self._notice.uninstall()
            if late:
                os.kill(os.getpid(), self._notice.signals[0])  # as if it came now
        if self._delete_at_end and is_chief(self._strategy):
            shutil.rmtree(self._directory.path, ignore_errors=True)


def _iterators_per_epoch(steps) -> int:
    """How many iterators of its dataset Keras 3's `fit` makes per epoch: one at the epoch's start
    and, when it knows the epoch's length, one more at its end (dropped at the next start)."""
    return 2 if steps else 1


def _num_servers(strategy) -> int:
    """The parameter servers of the strategy's job (0 without)."""
    return len(getattr(getattr(strategy, "cluster_info", None), "ps_addresses", None) or ())


def _build_optimizer(model) -> None:
    """Creates the optimizer's slots before they are listed: without a strategy Keras makes them at
    the first step, and a checkpoint listing the variables earlier would save and restore none."""
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None and not optimizer.built:
        with model.distribute_strategy.scope():
            optimizer.build(model.trainable_variables)
