"""Checkpoint files: the prefix a save or restore runs for, and companion files deleted with it.

Replaces ``TrackableSaver.save`` and ``TrackableSaver.restore``
(``tensorflow/python/checkpoint/checkpoint.py``, the one path of
`tf.train.Checkpoint`'s write/save/read/restore and
`tf.train.CheckpointManager.save`): they record the prefix they write or read
for the duration of the call, so that an object serialized into the
checkpoint (a table whose servers or workers write their own files) can put
its files beside it and find them there again, wherever the checkpoint was
copied (`current_checkpoint_prefix`, `current_restore_prefix`).

And replaces ``checkpoint_management._delete_file_if_exists`` (how
`tf.train.CheckpointManager` deletes the checkpoints beyond ``max_to_keep``,
and `tf.train.remove_checkpoint`): when it deletes a checkpoint's ``.index``,
it also deletes the files registered with `delete_with_checkpoints` beside it
(the tables' shard files).
"""

from __future__ import annotations

import threading

import tensorflow as tf

from tfx_dist._tf_compat import replacements

_saving = threading.local()
_companion_globs: list[str] = []


def current_checkpoint_prefix() -> str | None:
    """The file prefix of the `tf.train.Checkpoint` save running in this thread, or None."""
    replacements.install()
    prefixes = getattr(_saving, "prefixes", None)
    return prefixes[-1] if prefixes else None


def current_restore_prefix() -> str | None:
    """The file prefix of the `tf.train.Checkpoint` restore running in this thread, or None.

    None also for a restoration deferred until an object is created (after
    ``restore()`` returned).
    """
    replacements.install()
    prefixes = getattr(_saving, "restoring", None)
    return prefixes[-1] if prefixes else None


def delete_with_checkpoints(glob_suffix: str) -> None:
    """TensorFlow's deletion of checkpoint ``P`` also deletes the files ``P + glob_suffix``."""
    replacements.install()
    if glob_suffix not in _companion_globs:
        _companion_globs.append(glob_suffix)


def _as_prefix(file_prefix):
    if isinstance(file_prefix, tf.Tensor):
        file_prefix = file_prefix.numpy() if tf.executing_eagerly() else None
    if isinstance(file_prefix, bytes):
        file_prefix = file_prefix.decode("utf-8")
    return file_prefix


def _recording(stack_name, prefix, call):
    stack = getattr(_saving, stack_name, None)
    if stack is None:
        stack = []
        setattr(_saving, stack_name, stack)
    stack.append(prefix)
    try:
        return call()
    finally:
        stack.pop()


def install() -> None:
    from tensorflow.python.checkpoint import checkpoint as checkpoint_lib

    saver = checkpoint_lib.TrackableSaver
    original_save, original_restore = saver.save, saver.restore

    def save(self, file_prefix, *args, **kwargs):
        prefix = _as_prefix(file_prefix)
        number = kwargs.get("checkpoint_number", args[0] if args else None)
        if prefix is not None and number:  # as TrackableSaver.save names the files
            prefix = f"{prefix}-{int(number)}"
        return _recording("prefixes", prefix,
                          lambda: original_save(self, file_prefix, *args, **kwargs))

    def restore(self, save_path, *args, **kwargs):
        return _recording("restoring", _as_prefix(save_path),
                          lambda: original_restore(self, save_path, *args, **kwargs))

    saver.save, saver.restore = save, restore

    from tensorflow.python.checkpoint import checkpoint_management
    original_delete = checkpoint_management._delete_file_if_exists

    def delete_file_if_exists(filespec):
        original_delete(filespec)
        if isinstance(filespec, str) and filespec.endswith(".index"):
            prefix = filespec[:-len(".index")]
            for suffix in tuple(_companion_globs):
                for path in tf.io.gfile.glob(prefix + suffix):
                    tf.io.gfile.remove(path)

    checkpoint_management._delete_file_if_exists = delete_file_if_exists
