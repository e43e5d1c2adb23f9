"""The checkpoint directory: complete checkpoints only, the latest named in LATEST.json.

Layout (the contract the launcher's restarts read too)::

    <dir>/ckpt-<step>/      one checkpoint: its files, then MANIFEST.json (each file's size and
                            SHA-256, written last)
    <dir>/LATEST.json       {"step", "epoch", "step_in_epoch", "num_workers", "num_ps", "path", "time"}

A checkpoint is written into ``<dir>/.tmp-ckpt-<step>/`` and renamed to
``ckpt-<step>/`` once complete (files and folder fsynced); only then is
``LATEST.json`` replaced (a temporary file and ``os.replace``). Older
checkpoints are deleted after that, the previous one is kept. So a process
killed at any point (SIGKILL, a second SIGTERM) leaves LATEST.json naming a
complete checkpoint. Reading checks the manifest: a checkpoint whose files
are missing, truncated or changed is skipped, with a warning naming it, for
the newest one that is complete.

Local or shared POSIX file systems (``os.rename`` is atomic there); the
folder must be one that every worker reads.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import time

from tfx_dist.errors import DataLossError

LATEST = "LATEST.json"
MANIFEST = "MANIFEST.json"
_CKPT = re.compile(r"^ckpt-(\d+)$")
_TMP_PREFIX = ".tmp-ckpt-"
_log = logging.getLogger("tfx_dist.fault_tolerance")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """One complete checkpoint: its folder and what LATEST.json says of it."""

    path: str
    step: int
    epoch: int
    step_in_epoch: int
    num_workers: int
    num_ps: int
    extra: dict

    def file(self, name: str) -> str:
        return os.path.join(self.path, name)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_json_atomically(path: str, value: dict) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class CheckpointDir:
    """Writes and finds the checkpoints of one directory.

    Args:
      path: the directory (created when the first checkpoint is written).
      keep: how many complete checkpoints to keep (at least 2: the previous
        one stays until the next is complete, and one more in case the newest
        turns out damaged).
    """

    def __init__(self, path: str, keep: int = 2):
        if not path:
            raise ValueError("A checkpoint directory is needed: pass one, or set TFX_CHECKPOINT_DIR.")
        if keep < 2:
            raise ValueError(f"keep must be at least 2 (the previous checkpoint stays). Received: {keep}")
        self.path = os.path.abspath(os.fspath(path))
        self.keep = keep

    # -- writing (one process: the chief) ---------------------------------------------------

    def staging(self, step: int) -> str:
        """Where the checkpoint of ``step`` is written before `commit` (the same on every worker)."""
        return os.path.join(self.path, f"{_TMP_PREFIX}{step}")

    def begin(self, step: int) -> str:
        """A fresh `staging` folder for the checkpoint of ``step``; fill it, then `commit`."""
        os.makedirs(self.path, exist_ok=True)
        tmp = self.staging(step)
        if os.path.exists(tmp):  # a writer killed at this step before
            shutil.rmtree(tmp)
        os.makedirs(tmp)
        return tmp

    def commit(self, tmp: str, *, step: int, epoch: int, step_in_epoch: int, num_workers: int,
               num_ps: int = 0, extra: dict | None = None) -> Checkpoint:
        """Makes the filled folder ``tmp`` the checkpoint of ``step`` and the latest one."""
        files = {}
        for name in sorted(os.listdir(tmp)):
            full = os.path.join(tmp, name)
            if os.path.isfile(full):  # (the other workers' scratch folders are gone by now)
                _fsync_path(full)
                files[name] = {"bytes": os.path.getsize(full), "sha256": _sha256(full)}
        info = {"step": int(step), "epoch": int(epoch), "step_in_epoch": int(step_in_epoch),
                "num_workers": int(num_workers), "num_ps": int(num_ps), "path": f"ckpt-{int(step)}"}
        _write_json_atomically(os.path.join(tmp, MANIFEST),
                               dict(info, files=files, extra=extra or {}))
        _fsync_path(tmp)
        final = os.path.join(self.path, info["path"])
        if os.path.exists(final):  # the same step saved again (a rerun that stopped there again)
            stale = f"{final}.old-{os.getpid()}"
            os.rename(final, stale)
            shutil.rmtree(stale, ignore_errors=True)
        os.rename(tmp, final)
        _fsync_path(self.path)
        _write_json_atomically(os.path.join(self.path, LATEST), dict(info, time=time.time()))
        _fsync_path(self.path)
        self._prune(keep_path=final)
        return Checkpoint(final, info["step"], info["epoch"], info["step_in_epoch"],
                          info["num_workers"], info["num_ps"], extra or {})

    def _prune(self, keep_path: str) -> None:
        """Deletes checkpoints beyond ``keep`` and what interrupted writers left behind."""
        for name in os.listdir(self.path):
            if name.startswith(_TMP_PREFIX) or ".old-" in name:
                shutil.rmtree(os.path.join(self.path, name), ignore_errors=True)
        steps = sorted(self._steps(), reverse=True)
        for step in steps[self.keep:]:
            path = os.path.join(self.path, f"ckpt-{step}")
            if path != keep_path:
                shutil.rmtree(path, ignore_errors=True)

    def _steps(self) -> list[int]:
        if not os.path.isdir(self.path):
            return []
        return [int(m.group(1)) for m in map(_CKPT.match, os.listdir(self.path)) if m]

    # -- reading (every process) ------------------------------------------------------------

    def latest(self) -> Checkpoint | None:
        """The newest complete checkpoint (LATEST.json's if it is complete), or None if there is none."""
        named = None
        try:
            with open(os.path.join(self.path, LATEST)) as f:
                named = json.load(f)["path"]
        except FileNotFoundError:
            pass
        except (ValueError, KeyError, OSError) as e:
            _log.warning("%s: unreadable (%s); looking for the newest complete checkpoint",
                         os.path.join(self.path, LATEST), e)
        candidates = [f"ckpt-{s}" for s in sorted(self._steps(), reverse=True)]
        if named in candidates:  # LATEST.json's first, then the others newest first
            candidates.remove(named)
            candidates.insert(0, named)
        for name in candidates:
            try:
                return self.verify(os.path.join(self.path, name))
            except DataLossError as e:
                _log.warning("skipping a damaged checkpoint: %s", e)
        return None

    def verify(self, path: str) -> Checkpoint:
        """The checkpoint in folder ``path``, checked complete.

        Raises:
          DataLossError: its manifest is missing or unreadable, or a file is
            missing or differs from the manifest (named).
        """
        try:
            with open(os.path.join(path, MANIFEST)) as f:
                manifest = json.load(f)
            files = manifest["files"]
        except (OSError, ValueError, KeyError) as e:
            raise DataLossError(f"checkpoint {path} is incomplete: no readable {MANIFEST} ({e})") from None
        for name, expected in files.items():
            full = os.path.join(path, name)
            if not os.path.isfile(full):
                raise DataLossError(f"checkpoint {path} is incomplete: {name} is missing")
            size = os.path.getsize(full)
            if size != expected["bytes"]:
                raise DataLossError(f"checkpoint {path}: {name} has {size} bytes, "
                                    f"its manifest says {expected['bytes']}")
            if _sha256(full) != expected["sha256"]:
                raise DataLossError(f"checkpoint {path}: {name} differs from what was written "
                                    "(SHA-256 mismatch)")
        return Checkpoint(os.path.abspath(path), manifest["step"], manifest["epoch"],
                          manifest["step_in_epoch"], manifest["num_workers"], manifest["num_ps"],
                          manifest.get("extra", {}))
