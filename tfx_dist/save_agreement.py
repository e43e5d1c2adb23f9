"""Multi-worker saves: every worker agrees on which save it made and whether it succeeded.

`tfx_dist.checkpointing` ends each outermost save (``model.save``,
``save_weights``, ``tf.train.Checkpoint.save``/``write``,
``CheckpointManager.save``) with `agree`: one small all-reduce in which each
worker reports its save (the method and this worker's count of saves) and
whether it failed. It returns once every worker's write is done (the
chief's file is complete), and:

* a save that failed on one worker fails on every worker, naming the workers
  and their errors: a worker that went on would pair its next save with the
  others' earlier one;
* workers that reach different saves at the same point fail with
  `SaveMismatchError`, naming what each one saved;
* a worker whose program has ended stands in for the others' remaining
  all-reduces (Horovod's ``join``, armed by `join_at_exit`) and reports no
  save: a save made on the chief alone (``if rank == 0: model.save(...)``)
  completes, and every process exits 0.

`worker_filepath` gives Keras's saves with one path on every worker their
places: the chief writes the path, the others a temporary file beside it
(`write_filepath`'s folder), deleted after the save.
"""

from __future__ import annotations

import abc
import atexit
import itertools
import os
import shutil
import sys

import numpy as np

from tfx_dist import errors

_SAVES = ("Model.save", "Model.save_weights", "Checkpoint.save", "Checkpoint.write",
          "CheckpointManager.save")
_count = itertools.count(1)  # this worker's outermost saves


class WorkerAgreement(abc.ABC):
    """What a multi-worker strategy's ``extended`` offers to saves (and other callers) that must
    agree across workers: a multi-worker tfx_dist strategy declares it by deriving from it."""

    @abc.abstractmethod
    def barrier(self) -> None:
        """Returns once every worker has called it."""

    @abc.abstractmethod
    def rows_of_workers(self, row) -> np.ndarray:
        """Every worker's ``row`` of ints, by rank (zeros for a worker whose program has ended)."""


def offers_agreement(strategy) -> bool:
    """Whether ``strategy``'s extended declares `WorkerAgreement`."""
    return isinstance(getattr(strategy, "extended", None), WorkerAgreement)


class SaveFailedError(errors.AbortedError):
    """A save failed on some worker: it failed on every worker."""


class SaveMismatchError(errors.MismatchError):
    """Workers made different saves at the same point of the program."""


def agree(extended, save: str, failure: BaseException | None) -> None:
    """After this worker's save (``failure``: its exception, or None): returns once every worker
    has made the same save successfully; raises on every worker otherwise.

    Args:
      extended: the multi-worker strategy's extended (a `WorkerAgreement`).
      save: which save (one of ``_SAVES``).
      failure: what this worker's save raised, if it did.
    """
    number = next(_count)
    row = [1, _SAVES.index(save) + 1, number, int(failure is not None)]
    try:
        rows = extended.rows_of_workers(row)
    except Exception as e:  # noqa: BLE001 - the save's own failure comes first
        if failure is not None:
            raise failure
        raise SaveFailedError(f"tfx_dist: {save} #{number} was written by this worker, which then "
                              f"waited for the other workers to finish theirs; they did not: {e}") from e
    present = [r for r in range(len(rows)) if rows[r][0]]
    failed = [r for r in present if rows[r][3]]
    if failed:
        message = (f"tfx_dist: {save} #{number} failed on worker(s) {failed} (see their errors), "
                   "so it fails on every worker")
        if failure is not None:
            raise SaveFailedError(f"{message}: {type(failure).__name__}: {failure}") from failure
        raise SaveFailedError(message)
    saves = {r: (int(rows[r][1]), int(rows[r][2])) for r in present}
    if len(set(saves.values())) > 1:
        each = "; ".join(f"worker {r}: {_SAVES[kind - 1]} #{n}" for r, (kind, n) in saves.items())
        raise SaveMismatchError(
            f"tfx_dist: workers made different saves at the same point ({each}). Call each save "
            "on every worker (the chief writes the file), or on the chief alone at the end.")


def worker_filepath(filepath, is_chief: bool, write_filepath):
    """Where this worker writes a Keras file given ``filepath`` on every worker: ``filepath``
    on the chief, `write_filepath`'s temporary place elsewhere (None: leave the path as it is)."""
    if is_chief or not isinstance(filepath, (str, os.PathLike)):
        return None
    filepath = os.fspath(filepath)
    if os.path.basename(os.path.dirname(filepath)).startswith("workertemp_"):
        return None  # already a temporary path (Keras's callbacks on a worker)
    return write_filepath(filepath)


def remove_worker_file(path: str) -> None:
    """Deletes a worker's temporary Keras file and its folder."""
    folder = os.path.dirname(path)
    shutil.rmtree(folder, ignore_errors=True) if folder else None


def join_at_exit(communicator) -> None:
    """At a normal exit, this worker stands in for the others' remaining all-reduces until every
    worker has ended (a chief's last save then completes); skipped after an uncaught error."""

    def join():
        if getattr(sys, "last_value", None) is not None:
            return  # the program failed: its peers learn that from the lost connection
        try:
            communicator.join(name="tfx_dist.exit")
        except errors.TfxError as e:
            print(f"tfx_dist: at exit, waiting for the other workers to end failed: {e}",
                  file=sys.stderr)

    atexit.register(join)


def rows_by_sum(all_reduce_sum, rank: int, size: int, row) -> np.ndarray:
    """Every worker's ``row`` (zeros for a worker that has ended), through one sum all-reduce."""
    rows = np.zeros((size, len(row)), np.int64)
    rows[rank] = row
    return np.asarray(all_reduce_sum(rows)).reshape(size, len(row))
