"""Every worker runs as many steps: workers fed inputs of different lengths fail at once.

Each step of a multi-worker loop is a collective of every worker, so a worker
with more batches than the others (``predict`` on per-worker data of another
length) would wait at its extra step until ``TFX_TIMEOUT_S``. Before a Keras
loop starts (`tfx_dist._tf_compat.keras_loop_steps`), the workers exchange
their numbers of batches in one small all-reduce; different numbers are an
`UnevenInputError` on every worker, naming each worker's count.
"""

from __future__ import annotations

from tfx_dist import errors

_UNKNOWN = -1


class UnevenInputError(errors.FailedPreconditionError):
    """Workers would run different numbers of steps."""


def check_same_step_count(rows_of_workers, steps: int | None) -> None:
    """Raises `UnevenInputError` on every worker unless all that know their number of steps
    (``steps``: this worker's, None if unknown) have the same.

    Args:
      rows_of_workers: every worker's row of ints by rank, from this worker's (zeros for a
        worker that has ended).
      steps: this worker's number of batches in the loop about to start.
    """
    rows = rows_of_workers([1, _UNKNOWN if steps is None else int(steps)])
    counts = {rank: int(row[1]) for rank, row in enumerate(rows) if row[0] and row[1] != _UNKNOWN}
    if len(set(counts.values())) > 1:
        each = ", ".join(f"worker {rank}: {n}" for rank, n in counts.items())
        raise UnevenInputError(
            f"tfx_dist: the workers' inputs have different numbers of batches ({each}). Every "
            "step is a collective of all workers, so the ones with more would wait for the others "
            "until TFX_TIMEOUT_S. Give every worker the same data (the strategy shards it, each "
            "worker reading its part), inputs of equal length, or the same steps=/steps_per_epoch=.")
