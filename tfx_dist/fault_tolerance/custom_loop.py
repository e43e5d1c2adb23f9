"""`PreemptionCheckpointHandler`: TensorFlow's API for custom loops, on tfx_dist's strategies.

TensorFlow's own handler (``tensorflow/python/distribute/failure_handling``)
agrees on the step to save through the coordination service's key-value
store (``context().set_config_key_value``), which only TensorFlow's gRPC
runtime starts; tfx_dist's strategies do not start it. Rather than provide
a second key-value store for one use, this is a replacement with the same
constructor and methods (``run``, ``save_checkpoint_if_preempted``,
``watch_preemption_scope``, ``total_run_calls``) built on this package's
pieces: the notice (SIGTERM), the step agreement (one max all-reduce of a
flag per ``run`` call, on the strategy's communicator) and the checkpoint
directory (``ckpt-<run calls>/`` and ``LATEST.json``). Once a tfx_dist
multi-worker strategy exists, ``tf.distribute.experimental.PreemptionCheckpointHandler``
builds this one (`install`), so programs written for TensorFlow's run unchanged
(the name is then a factory: ``isinstance`` checks against it no longer hold;
TensorFlow's class stays ``tfx_dist.fault_tolerance.custom_loop.tensorflow_handler``).

Differences from TensorFlow's: the checkpoint is saved at the step the
workers agree on and the process exits with ``PREEMPTED_EXIT_CODE`` (75)
unless ``termination_config.exit_fn`` says otherwise; ``grace_period``
bounds the save (as ``TFX_PREEMPTION_GRACE_S``) instead of letting training
go on; with a `tf.train.CheckpointManager` the checkpoint is the manager's
(TensorFlow's file layout), with a `tf.train.Checkpoint` it is written in
the checkpoint directory's layout.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import tempfile
import weakref

import tensorflow as tf

from tfx_dist.fault_tolerance import PREEMPTED_EXIT_CODE
from tfx_dist.fault_tolerance.agreement import StopAgreement, is_chief, wait_for_everyone
from tfx_dist.fault_tolerance.checkpoint_dir import CheckpointDir
from tfx_dist.fault_tolerance.notice import PreemptionNotice

_log = logging.getLogger("tfx_dist.fault_tolerance")
_STATE = "state"  # the tf.train.Checkpoint's prefix inside a ckpt-<n>/ folder
_RUNS = "checkpointed_runs"  # TensorFlow's name for the run counter attached to the checkpoint


class PreemptionCheckpointHandler:
    """Saves a custom loop's checkpoint at an agreed step on SIGTERM, and restores it when created.

    Example (TensorFlow's, unchanged):
    ```python
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    handler = tf.distribute.experimental.PreemptionCheckpointHandler(
        strategy.cluster_resolver, checkpoint, "/shared/ckpt")
    for step in range(handler.total_run_calls, NUM_STEPS):
        handler.run(distributed_train_step, next(iterator))
    ```
    The input's position is the program's: ``total_run_calls`` says where to
    resume it (as with TensorFlow's handler).

    Args:
      cluster_resolver: accepted for TensorFlow's signature (the strategy knows the job).
      checkpoint_or_checkpoint_manager: a `tf.train.Checkpoint` (then
        ``checkpoint_dir`` is needed) or a `tf.train.CheckpointManager`.
      checkpoint_dir: the checkpoint directory (``ckpt-<n>/``, ``LATEST.json``).
      termination_config: optional `tf.distribute.experimental.TerminationConfig`:
        its ``termination_watcher_fn`` (polled at each run) adds to SIGTERM, its
        ``exit_fn`` replaces the exit with 75, its ``grace_period`` bounds the save,
        its ``save_fn`` replaces the save.
      strategy: the tfx_dist strategy (default: the one in scope, else the newest alive).
    """

    def __init__(self, cluster_resolver, checkpoint_or_checkpoint_manager, checkpoint_dir=None,
                 termination_config=None, strategy=None):
        del cluster_resolver
        manager = checkpoint_or_checkpoint_manager
        if isinstance(manager, tf.train.CheckpointManager):
            self._manager, self._checkpoint, self._directory = manager, manager.checkpoint, None
        else:
            if not checkpoint_dir:
                raise ValueError("When a checkpoint is passed, a checkpoint_dir must be passed as well.")
            self._manager, self._checkpoint = None, manager
            self._directory = CheckpointDir(checkpoint_dir)
        self._strategy = strategy if strategy is not None else _current_strategy()
        config = termination_config
        self._watcher_fn = getattr(config, "termination_watcher_fn", None)
        self._exit_fn = getattr(config, "exit_fn", None)
        self._save_fn = getattr(config, "save_fn", None)
        grace = getattr(config, "grace_period", None)
        self._notice = PreemptionNotice((signal.SIGTERM,), grace_s=grace or None)
        self._agreement = StopAgreement(self._strategy)
        self._runs = tf.Variable(0, dtype=tf.int64, trainable=False, name=_RUNS)
        if not hasattr(self._checkpoint, _RUNS):
            setattr(self._checkpoint, _RUNS, self._runs)
        else:
            self._runs = getattr(self._checkpoint, _RUNS)
        self._restore()
        self._run_counter = int(self._runs.numpy())
        self._notice.install()

    @property
    def total_run_calls(self) -> int:
        """The number of ``run`` calls so far, those before the restart included."""
        return self._run_counter

    def run(self, distributed_train_function, *args, **kwargs):
        """``distributed_train_function(*args, **kwargs)``, after saving and exiting if preempted."""
        self._check_preemption()
        result = distributed_train_function(*args, **kwargs)
        self._run_counter += 1
        return result

    def save_checkpoint_if_preempted(self, *args, **kwargs):
        """Saves (``args`` go to the save) and exits if preempted; counts as a run call."""
        self._check_preemption(*args, **kwargs)
        self._run_counter += 1

    @contextlib.contextmanager
    def watch_preemption_scope(self):
        """TensorFlow's scope for TPUs; nothing to do here (``run`` handles preemption)."""
        yield

    # -- restore, check, save ----------------------------------------------------------------

    def _restore(self) -> None:
        if self._manager is not None:
            self._manager.restore_or_initialize()
            return
        latest = self._directory.latest()
        if latest is not None:
            self._checkpoint.read(os.path.join(latest.path, _STATE)).assert_existing_objects_matched()
            _log.warning("resumed from %s: run call %d", latest.path, int(self._runs.numpy()))

    def _check_preemption(self, *args, **kwargs) -> None:
        noticed = self._notice.received or bool(self._watcher_fn and self._watcher_fn())
        if not self._agreement.should_stop(noticed):
            return
        self._runs.assign(self._run_counter)
        if self._save_fn is not None:
            self._save_fn(*args, **kwargs)
        else:
            self._save(*args, **kwargs)
        self._notice.done()
        _log.warning("preempted: saved after run call %d; exiting", self._run_counter)
        if self._exit_fn is not None:
            self._exit_fn()
        raise SystemExit(PREEMPTED_EXIT_CODE)

    def _save(self, *args, **kwargs) -> None:
        chief = is_chief(self._strategy)
        if self._manager is not None and chief:
            self._manager.save(*args, **kwargs)
        elif chief:
            folder = self._directory.begin(self._run_counter)
            self._checkpoint.write(os.path.join(folder, _STATE))
            self._directory.commit(folder, step=self._run_counter, epoch=0,
                                   step_in_epoch=self._run_counter,
                                   num_workers=self._agreement.num_workers)
        else:  # every worker saves (it may need collectives); the others' files are thrown away
            scratch = tempfile.mkdtemp(prefix="tfx_dist-preemption-")
            try:
                self._checkpoint.write(os.path.join(scratch, _STATE))
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
        wait_for_everyone(self._strategy)


# The tfx_dist multi-worker strategies alive in this process, newest last (`install`).
_strategies: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
tensorflow_handler = tf.distribute.experimental.PreemptionCheckpointHandler


def _current_strategy():
    if tf.distribute.has_strategy():
        return tf.distribute.get_strategy()
    live = [_strategies[k] for k in sorted(_strategies.keys()) if k in _strategies]
    return live[-1] if live else tf.distribute.get_strategy()


class _Dispatch:
    """``tf.distribute.experimental.PreemptionCheckpointHandler`` once tfx_dist replaced it:
    tfx_dist's handler where a tfx_dist strategy trains, TensorFlow's otherwise."""

    def __new__(cls, *args, **kwargs):
        strategy = kwargs.get("strategy") or _current_strategy()
        if type(strategy).__module__.startswith("tfx_dist."):
            return PreemptionCheckpointHandler(*args, **kwargs)
        return tensorflow_handler(*args, **kwargs)


def install(strategy) -> None:
    """Records a tfx_dist multi-worker strategy and makes
    ``tf.distribute.experimental.PreemptionCheckpointHandler`` build tfx_dist's handler for it."""
    _strategies[max(_strategies.keys(), default=-1) + 1] = strategy
    tf.distribute.experimental.PreemptionCheckpointHandler = _Dispatch
