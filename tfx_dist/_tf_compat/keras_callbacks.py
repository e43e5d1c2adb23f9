"""Keras's own file-writing callbacks under several workers, unchanged.

Keras 3's callbacks know nothing of workers: under a multi-worker strategy
every worker's `ModelCheckpoint`, `BackupAndRestore`, `TensorBoard` and
`CSVLogger` would write (and `BackupAndRestore` delete) the same files at
the same time. TensorFlow's Keras 2 callbacks had the chief write the real
files and the other workers write elsewhere; this module does the same for
Keras 3, with one mechanism for every callback:

When `fit`, `evaluate` or `predict` builds its `keras.callbacks.CallbackList`
on a worker that is not the chief of a multi-worker strategy, the path
attributes of each file-writing callback (`_PATH_ATTRIBUTES`) are pointed into
a fresh temporary folder of that worker (``tempfile.mkdtemp``, one per run,
named ``tfx_dist-worker<task id>-*``; the original path is kept below it,
absolute and without its scheme). When the run ends (the outermost
``on_*_end``), the attributes get their values back and the folder is
deleted. Every worker still calls every callback and saves (saving may need
the other workers), and the chief's files are the real ones.

`BackupAndRestore` restores from the real ``backup_dir`` on every worker:
its ``on_train_begin`` runs with the real paths (`_READS_REAL_PATHS`).

Private Keras API patched here (to move into a compatibility module later):
``keras.src.callbacks.callback_list.CallbackList.__init__``,
``CallbackList.on_train_begin`` and ``CallbackList._on_end``, plus the
callbacks' private path attributes (``BackupAndRestore._weights_path`` ...).
`install` checks that they exist (tested with Keras 3.15) and installs once.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
import threading
import warnings

import keras
from keras.src.callbacks import callback_list as _callback_list

from tfx_dist import checkpointing

# Callback class -> the attributes that hold paths it writes (set by __init__).
_PATH_ATTRIBUTES = {
    keras.callbacks.BackupAndRestore: ("backup_dir", "_weights_path", "_training_metadata_path",
                                       "_prev_weights_path", "_prev_training_metadata_path"),
    keras.callbacks.ModelCheckpoint: ("filepath",),
    keras.callbacks.TensorBoard: ("log_dir",),  # its other folders derive in set_model
    keras.callbacks.CSVLogger: ("filename",),
}
# Callback class -> hooks that read the real files (run with the real paths).
_READS_REAL_PATHS = {keras.callbacks.BackupAndRestore: "on_train_begin"}
_TESTED_KERAS = "3.15"

_install_lock = threading.Lock()
_installed = False
_live_temp_dirs: set = set()


def _attributes_of(callback):
    for cls, names in _PATH_ATTRIBUTES.items():
        if isinstance(callback, cls):
            return cls, names
    return None, ()


def local_path(path: str, root: str) -> str:
    """Where a non-chief worker writes ``path``: below ``root``, absolute, scheme dropped."""
    path = os.fspath(path)
    if "://" in path:
        path = path.split("://", 1)[1]
    else:
        path = os.path.abspath(path)
    return os.path.join(root, path.lstrip("/"))


class _Redirect:
    """The paths of one `CallbackList`'s callbacks, pointed into one temporary folder."""

    def __init__(self, callbacks, task_id):
        self.root = tempfile.mkdtemp(prefix=f"tfx_dist-worker{task_id}-")
        _live_temp_dirs.add(self.root)
        self.real = {}  # id(callback) -> (callback, {attribute: real value})
        for callback in callbacks:
            _, names = _attributes_of(callback)
            values = {n: getattr(callback, n) for n in names if getattr(callback, n, None)}
            if values:
                self.real[id(callback)] = (callback, values)
        self.point(temp=True)

    def point(self, temp: bool, only=None):
        for callback, values in self.real.values():
            if only is not None and not isinstance(callback, only):
                continue
            for name, value in values.items():
                setattr(callback, name, local_path(value, self.root) if temp else value)

    def close(self):
        self.point(temp=False)
        shutil.rmtree(self.root, ignore_errors=True)
        _live_temp_dirs.discard(self.root)


def _redirect_for(callbacks, model):
    if model is None:
        return None
    strategy = getattr(model, "distribute_strategy", None)
    if strategy is None or checkpointing.is_chief(strategy):
        return None
    if not any(_attributes_of(c)[1] for c in callbacks):
        return None
    return _Redirect(callbacks, strategy.cluster_resolver.task_id)


def _patched_init(original):
    @functools.wraps(original)
    def __init__(self, callbacks=None, add_history=False, add_progbar=False, model=None,
                 **params):
        flat = keras.tree.flatten(callbacks) if callbacks else []
        # Before the original __init__: its set_model derives TensorBoard's folders.
        self._tfx_redirect = _redirect_for(flat, model)
        original(self, callbacks, add_history, add_progbar, model, **params)

    return __init__


def _patched_on_train_begin(original):
    @functools.wraps(original)
    def on_train_begin(self, logs=None):
        redirect = getattr(self, "_tfx_redirect", None)
        if redirect is None:
            return original(self, logs)
        readers = tuple(cls for cls, hook in _READS_REAL_PATHS.items() if hook == "on_train_begin")
        redirect.point(temp=False, only=readers)
        try:
            return original(self, logs)
        finally:
            redirect.point(temp=True, only=readers)

    return on_train_begin


def _patched_on_end(original):
    @functools.wraps(original)
    def _on_end(self):
        original(self)
        redirect = getattr(self, "_tfx_redirect", None)
        if redirect is not None and self._in_begin_end_block_count == 0:
            self._tfx_redirect = None
            redirect.close()

    return _on_end


@atexit.register
def _remove_leftovers():  # a run that raised never reached its on_*_end
    for root in list(_live_temp_dirs):
        shutil.rmtree(root, ignore_errors=True)


def install() -> None:
    """Installs the `CallbackList` hooks once (called by multi-worker strategies)."""
    global _installed
    with _install_lock:
        if _installed:
            return
        cls = _callback_list.CallbackList
        missing = [n for n in ("__init__", "on_train_begin", "_on_end") if not hasattr(cls, n)]
        if not hasattr(cls(), "_in_begin_end_block_count"):
            missing.append("_in_begin_end_block_count")
        if missing:
            warnings.warn(
                f"tfx_dist: Keras {keras.__version__}'s CallbackList lacks {missing} (tested "
                f"with Keras {_TESTED_KERAS}); Keras's file-writing callbacks are not made safe "
                f"for several workers.")
            _installed = True
            return
        if not keras.__version__.startswith(_TESTED_KERAS):
            warnings.warn(f"tfx_dist: multi-worker callback paths tested with Keras "
                          f"{_TESTED_KERAS}, running {keras.__version__}.")
        cls.__init__ = _patched_init(cls.__init__)
        cls.on_train_begin = _patched_on_train_begin(cls.on_train_begin)
        cls._on_end = _patched_on_end(cls._on_end)
        _installed = True
