"""Checkpoints under several workers: the chief writes, the others do not collide.

TensorFlow's convention, which the multi-worker tutorial follows: every
worker saves (saving may run collectives), the chief to the real path and the
others to temporary places they delete afterwards: `write_dirpath`,
`write_filepath` and `remove_temp_dirpath` give those places.
`BackupAndRestore` takes Keras's callback's arguments and resumes step-exact
(`tfx_dist.fault_tolerance`; Keras's own works unchanged, see
`tfx_dist._tf_compat.keras_callbacks`).

Save barrier: a worker that saves and then loads the chief's file (the
tutorial does) must not load before the chief has finished writing it. Once a
`tfx_dist.MultiWorkerMirroredStrategy` of several workers exists in the
process, `install_save_barrier` (called by the strategy) makes these return
on every worker only after every worker, the chief included, has finished
its write (a barrier through the strategy's communicator, run after the
write):

* ``keras.Model.save`` and ``keras.Model.save_weights``;
* ``tf.train.Checkpoint.save`` and ``tf.train.Checkpoint.write``;
* ``tf.train.CheckpointManager.save``.

Call them on every worker, as TensorFlow's tutorials do (Keras's saves may take
the same path everywhere: the others write beside it), or on the chief alone
at the end of the program; each save's barrier checks that every worker made
the same save and that none failed (`tfx_dist.save_agreement`).
A save nested in another (``CheckpointManager.save`` writes through the
checkpoint) waits once, at the end of the outermost. Only eager calls wait: a
save inside ``tf.function`` is left as it is.

The patches wrap public methods of Keras and TensorFlow classes (no private
attribute is used), so they are version-independent; they are installed once.
"""

from __future__ import annotations

import functools
import os
import threading
import weakref

import keras
import tensorflow as tf

from tfx_dist import save_agreement
from tfx_dist.fault_tolerance import custom_loop
from tfx_dist.fault_tolerance.keras_callback import StepCheckpoint

# Multi-worker strategies (several workers) alive in this process, newest last.
_strategies: "weakref.WeakValueDictionary[int, object]" = weakref.WeakValueDictionary()
_next_key = [0]
_depth = threading.local()
_install_lock = threading.Lock()
_installed = False


def register_strategy(strategy) -> None:
    """Records a multi-worker strategy so that saves outside its scope find it, and so that
    TensorFlow's ``PreemptionCheckpointHandler`` works on it (`tfx_dist.fault_tolerance`)."""
    _strategies[_next_key[0]] = strategy
    _next_key[0] += 1
    custom_loop.install(strategy)


def is_multi_worker(strategy) -> bool:
    """Whether ``strategy`` trains with several workers (TensorFlow's definition)."""
    extended = getattr(strategy, "extended", None)
    return bool(getattr(extended, "_in_multi_worker_mode", lambda: False)())


def is_chief(strategy) -> bool:
    """Whether this worker writes the real files (also True for one worker)."""
    return not is_multi_worker(strategy) or bool(strategy.extended.should_checkpoint)


def saving_strategy(model=None):
    """The multi-worker strategy a save belongs to, or None.

    The model's strategy, else the strategy in scope, else the newest
    multi-worker strategy alive in the process (a `tf.train.Checkpoint` is
    usually saved outside any scope).
    """
    candidates = []
    if model is not None:
        candidates.append(getattr(model, "distribute_strategy", None))
    if tf.distribute.has_strategy():
        candidates.append(tf.distribute.get_strategy())
    live = [_strategies[k] for k in sorted(_strategies.keys()) if k in _strategies]
    candidates.extend(reversed(live))
    for strategy in candidates:
        if strategy is not None and is_multi_worker(strategy) and save_agreement.offers_agreement(strategy):
            return strategy
    return None


def _with_barrier(method, model_arg: bool, save: str = ""):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        depth = getattr(_depth, "value", 0)
        strategy = (saving_strategy(self if model_arg else None)
                    if depth == 0 and tf.executing_eagerly() else None)
        _depth.value = depth + 1
        failure = temp = None
        try:
            temp = _worker_file(strategy, args, kwargs) if model_arg else None
            if temp:  # the same path on every worker: the others write beside it (save_agreement)
                args, kwargs = ((temp,) + args[1:], kwargs) if args else (args, dict(kwargs, filepath=temp))
            result = method(self, *args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - every worker learns of it (save_agreement)
            failure = e
        finally:
            _depth.value = depth
        if temp:
            save_agreement.remove_worker_file(temp)
        if strategy is not None:  # after this worker's write: the chief's is done
            save_agreement.agree(strategy.extended, save, failure)
        if failure is not None:
            raise failure
        return result

    wrapper.__tfx_dist_save_barrier__ = True
    return wrapper


def _worker_file(strategy, args, kwargs):
    filepath = args[0] if args else kwargs.get("filepath")
    return strategy and save_agreement.worker_filepath(
        filepath, is_chief(strategy), lambda path: write_filepath(path, strategy))


def _save_methods():
    return [(keras.Model, "save", True), (keras.Model, "save_weights", True),
            (tf.train.Checkpoint, "save", False), (tf.train.Checkpoint, "write", False),
            (tf.train.CheckpointManager, "save", False)]


def install_save_barrier() -> None:
    """Makes saves return only once every worker's write is complete (idempotent)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        for owner, name, model_arg in _save_methods():
            method = getattr(owner, name)
            if not getattr(method, "__tfx_dist_save_barrier__", False):
                setattr(owner, name, _with_barrier(method, model_arg, f"{owner.__name__}.{name}"))
        _installed = True


# -- paths: the chief writes, the others write to temporary folders --------------------------

def _strategy_or_current(strategy):
    return strategy if strategy is not None else tf.distribute.get_strategy()


def write_dirpath(dirpath: str, strategy=None) -> str:
    """The folder this worker should write ``dirpath``'s checkpoint to.

    The chief (and a single worker) writes to ``dirpath`` itself; every other
    worker to ``dirpath/workertemp_<task id>``, TensorFlow's convention, so
    that it never clobbers the chief's files. Remove it afterwards with
    `remove_temp_dirpath`.

    Example:
    ```python
    path = tfx_dist.checkpointing.write_dirpath("/ckpt", strategy)
    manager = tf.train.CheckpointManager(checkpoint, path, max_to_keep=1)
    manager.save()                                   # on every worker
    remove_temp_dirpath("/ckpt", strategy)
    ```
    """
    strategy = _strategy_or_current(strategy)
    path = dirpath if is_chief(strategy) else os.path.join(
        dirpath, f"workertemp_{strategy.cluster_resolver.task_id}")
    if path:  # created: a save there must not fail for want of a folder
        tf.io.gfile.makedirs(path)
    return path


def write_filepath(filepath: str, strategy=None) -> str:
    """`write_dirpath` for a file path (its folder created): the chief keeps it, the others write
    elsewhere."""
    dirpath, base = os.path.split(filepath)
    return os.path.join(write_dirpath(dirpath, strategy), base)


def remove_temp_dirpath(dirpath: str, strategy=None) -> None:
    """Deletes this worker's temporary folder made by `write_dirpath` (no-op on the chief)."""
    strategy = _strategy_or_current(strategy)
    path = write_dirpath(dirpath, strategy)
    if path != dirpath:
        tf.io.gfile.rmtree(path) if tf.io.gfile.exists(path) else None


class BackupAndRestore(StepCheckpoint, keras.callbacks.BackupAndRestore):
    """`keras.callbacks.BackupAndRestore`'s arguments, with a step-exact resume and preemption.

    A `tfx_dist.fault_tolerance.StepCheckpoint` (see there for what resumes
    exactly, and for which inputs) in ``backup_dir``: saves at every epoch's
    end or every ``save_freq`` steps, and on a preemption notice (SIGTERM:
    the workers agree on a step, save it and exit with
    ``tfx_dist.fault_tolerance.PREEMPTED_EXIT_CODE``, 75). A rerun continues
    at the step after the last one saved, not at the start of its epoch as
    Keras's callback does. A ``backup_dir`` written by Keras's own callback
    is still restored, Keras's way (at its epoch). ``backup_dir`` must be on
    storage every worker reads; the chief writes it.

    Args:
      backup_dir: the checkpoint directory (``ckpt-<step>/`` folders, ``LATEST.json``).
      save_freq: ``"epoch"`` or a number of steps.
      double_checkpoint: accepted for Keras's signature: the previous
        checkpoint is always kept until the next one is complete.
      delete_checkpoint: delete ``backup_dir`` once `fit` ends normally.
      preemption: handle SIGTERM as a preemption notice.
    """

    def __init__(self, backup_dir, save_freq="epoch", double_checkpoint=False, delete_checkpoint=True,
                 preemption=True):
        keras.callbacks.BackupAndRestore.__init__(self, backup_dir, save_freq=save_freq,
                                                  double_checkpoint=double_checkpoint,
                                                  delete_checkpoint=delete_checkpoint)
        StepCheckpoint.__init__(self, backup_dir, save_freq=save_freq, preemption=preemption,
                                delete_at_end=delete_checkpoint)

    def _restore_latest(self) -> None:
        if self._directory.latest() is None and os.path.exists(self._training_metadata_path):
            keras.callbacks.BackupAndRestore.on_train_begin(self)  # a backup of Keras's callback
            self._step = int(self.model.optimizer.iterations.numpy())
            return
        super()._restore_latest()
