"""Where a parameter-server table's checkpoint files live, and finding them again.

A table is saved by its servers, each writing its own shard to
``<prefix>.shard-<s>-of-<S>`` (`custom_ops/embedding/core/checkpoint.h`), in
parallel; no row passes through a worker. ``prefix`` sits beside the
`tf.train.Checkpoint` files: ``<checkpoint prefix>-tfx_ps-<layer name>-<table id>``.
The checkpoint itself records ``prefix`` (a string tensor) and the
optimizer whose slots the files hold; restoring looks for the files beside
the checkpoint being restored (it may have been copied or moved since), or
at the recorded path when TensorFlow restores the table after ``restore()``
returned (deferred restoration), and finds every shard file of the writing
job (any number of servers) by listing ``prefix.shard-*``.

The servers read and write these paths themselves: they must be on a file
system that the workers and the servers share (local disk for a job on one
host), as TensorFlow's own parameter servers require.
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import re

import tensorflow as tf

from tfx_dist.embedding import store
from tfx_dist.parameter_server import _native

_SHARD = re.compile(r"\.shard-(\d+)-of-(\d+)$")
# Every table's shard files of the checkpoint at prefix P are P + this (a glob).
SHARD_FILES_OF_CHECKPOINT = "-tfx_ps-*.shard-*-of-*"


def table_prefix(checkpoint_prefix: str, table_name: str, table_id: int) -> str:
    """The prefix of a table's shard files in the checkpoint at ``checkpoint_prefix``."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", table_name)
    return f"{checkpoint_prefix}-tfx_ps-{safe}-{table_id}"


def beside(recorded_prefix: str, checkpoint_prefix: str | None) -> str:
    """The table prefix recorded at save time, moved beside ``checkpoint_prefix`` if known."""
    if checkpoint_prefix is None:
        return recorded_prefix
    return os.path.join(os.path.dirname(checkpoint_prefix), os.path.basename(recorded_prefix))


def shard_path(prefix: str, shard: int, num_shards: int) -> str:
    return f"{prefix}.shard-{shard}-of-{num_shards}"


def existing_shards(prefix: str) -> list[str]:
    """Every shard file of ``prefix`` present (any job size), sorted."""
    return sorted(p for p in tf.io.gfile.glob(prefix + ".shard-*-of-*") if _SHARD.search(p))


def shard_files(prefix: str, table: str) -> list[str]:
    """The files of every shard that wrote ``prefix``, checked complete.

    Raises:
      FileNotFoundError: no file, or one shard's file is missing (named).
      ValueError: files of jobs of different sizes share the prefix.
    """
    found = existing_shards(prefix)
    if not found:
        raise FileNotFoundError(
            f"ShardedEmbedding '{table}': no checkpoint files of its table on the parameter "
            f"servers: expected {shard_path(prefix, 0, 'S')} and the other shards (were they "
            "written on a file system this worker and the servers share?)")
    sizes = {int(_SHARD.search(p).group(2)) for p in found}
    if len(sizes) != 1:
        raise ValueError(f"ShardedEmbedding '{table}': checkpoint files of jobs of {sorted(sizes)} "
                         f"servers share the prefix {prefix}: {found}")
    (num_shards,) = sizes
    paths = [shard_path(prefix, s, num_shards) for s in range(num_shards)]
    for s, path in enumerate(paths):
        if not tf.io.gfile.exists(path):
            raise FileNotFoundError(f"ShardedEmbedding '{table}': checkpoint file {path} (shard {s} "
                                    f"of the {num_shards} that saved the table) is missing; the "
                                    "table is unchanged")
    return [os.path.abspath(p) if "://" not in p else p for p in paths]


def encode_optimizer(rule) -> str:
    """A store optimizer rule (`store.SGD`, `store.Adagrad`...) as JSON, or "" for none."""
    if rule is None:
        return ""
    return json.dumps({"kind": type(rule).__name__, **dataclasses.asdict(rule)}, sort_keys=True)


def decode_optimizer(text: str):
    if not text:
        return None
    fields = json.loads(text)
    kind = fields.pop("kind")
    if kind not in {cls.__name__ for cls in store.NATIVE_RULES.values()}:
        # "KerasRule": slots of Keras's own update step, which tables no longer run.
        raise ValueError(f"The checkpoint's table slots are those of an optimizer rule this "
                         f"version does not have ({kind}: {fields}). Received: {text!r}")
    return getattr(store, kind)(**fields)


def save_on_servers(client_id: int, table_id: int, prefix: str) -> int:
    """Has every server write its shard of the table to ``prefix.shard-<s>-of-<S>`` (in
    parallel), first removing another job size's files; returns the servers' optimizer step
    count (Adam's), which the files do not hold."""
    for stale in existing_shards(prefix):
        tf.io.gfile.remove(stale)
    applies = ctypes.c_int64(0)
    _native.call(_native.lib().tfx_ps_save, client_id, table_id, prefix.encode(), ctypes.byref(applies))
    return applies.value


def restore_on_servers(client_id: int, table_id: int, paths: list[str], applies: int) -> None:
    """Replaces the table's rows and slots on every server with those of the shard files
    ``paths`` (`shard_files`: written by any number of servers; a corrupt one is an error naming
    it)."""
    encoded = [p.encode() for p in paths]
    array = (ctypes.c_char_p * len(encoded))(*encoded)
    _native.call(_native.lib().tfx_ps_restore, client_id, table_id, array, len(encoded), applies)
