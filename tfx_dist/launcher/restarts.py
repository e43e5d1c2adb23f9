"""Whether a failed or preempted job starts again, and with how many workers.

``--max-restarts K`` counts restarts *from the same checkpoint step*: a run
after which ``LATEST.json``'s step advanced starts the count again, so a long
job on preemptible machines may be restarted as often as it makes progress,
while a job that keeps failing before its next checkpoint stops after K
restarts instead of looping. Without ``--checkpoint-dir`` the launcher cannot
see progress, and K counts every restart.

``--min-workers M`` (below ``-n``): a worker slot that fails first in
``--slot-failures`` runs in a row is dropped and the job goes on with one
worker fewer (renumbered ranks, new TF_CONFIG), down to M workers, as
torchrun's ``--nnodes=MIN:MAX`` does; a slot that would take the job below M
stops it with the last error of every slot. A preemption (exit 75) is no
fault of the slot and does not count.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Dict, List, Optional, Sequence

from tfx_dist.launcher.status import describe_exit, say
from tfx_dist.launcher.supervisor import Outcome

LATEST = "LATEST.json"  # what the checkpoint writer replaces atomically after each save


def latest_step(checkpoint_dir: Optional[str]) -> Optional[int]:
    """The ``step`` of ``<checkpoint_dir>/LATEST.json``; None without a directory or a checkpoint."""
    if not checkpoint_dir:
        return None
    path = os.path.join(checkpoint_dir, LATEST)
    try:
        with open(path) as f:
            step = json.load(f)["step"]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as e:
        say(f"cannot read the step in {path} ({type(e).__name__}: {e}); counting it as no checkpoint")
        return None
    if isinstance(step, bool) or not isinstance(step, int):
        say(f"{path}: 'step' is {step!r}, not an integer; counting it as no checkpoint")
        return None
    return step


class RestartPolicy:
    """Decides after each failed run whether to restart the job, and which worker slots it keeps."""

    def __init__(self, max_restarts: int, num_workers: int, min_workers: int, slot_failures: int,
                 checkpoint_dir: Optional[str]):
        self.max_restarts = max_restarts
        self.min_workers = min_workers
        self.can_shrink = min_workers < num_workers
        self.slot_failures = slot_failures
        self.checkpoint_dir = checkpoint_dir
        self.slots = list(range(num_workers))  # each worker's slot: its rank in the first run
        self.restarts = 0                       # in all
        self.from_same_step = 0                 # since LATEST.json's step last advanced
        self.start_step = latest_step(checkpoint_dir)
        self._in_a_row: Dict[int, int] = {}     # slot -> runs in a row that it failed first
        self._last_error: Dict[int, List[str]] = {}
        self._history: List[str] = []

    @property
    def num_workers(self) -> int:
        return len(self.slots)

    def restart_after(self, outcome: Outcome, labels: Sequence[str], restart_count: int) -> bool:
        """Records a restartable outcome; True (and a line saying why) when the job runs again.

        ``labels``: how the run named its tasks; ``restart_count``: the TFX_RESTART_COUNT
        the next run would get.
        """
        step = latest_step(self.checkpoint_dir)
        if step is not None and (self.start_step is None or step > self.start_step):
            self.from_same_step = 0  # progress: the count starts again
        rank = outcome.rank
        who = f"rank {rank}" if labels[rank] == str(rank) else f"task {labels[rank]}"
        cause = f"{who} {describe_exit(outcome.code)}"
        self._history.append(f"run {len(self._history) + 1} ({self.num_workers} workers): {cause}; "
                             f"checkpoint: {self._checkpoint(step)}")
        if not outcome.preempted and rank < self.num_workers:
            slot = self.slots[rank]
            self._in_a_row = {slot: self._in_a_row.get(slot, 0) + 1}  # the others' rows end
            self._last_error[slot] = [cause] + outcome.stderr_tail[-3:]
            if self.can_shrink and self._in_a_row[slot] >= self.slot_failures:
                return self._shrink(rank, slot, step, restart_count)
        if self.from_same_step >= self.max_restarts:
            self._stop(f"the job failed {self.from_same_step + 1} times in a row with no progress in "
                       f"its checkpoint ({self._checkpoint(step)}; --max-restarts {self.max_restarts})")
            return False
        self.from_same_step += 1
        self._restart(cause, step, restart_count,
                      f"restart {self.from_same_step} of {self.max_restarts} from this step")
        return True

    def _shrink(self, rank: int, slot: int, step: Optional[int], restart_count: int) -> bool:
        failures = self._in_a_row.pop(slot)
        if self.num_workers - 1 < self.min_workers:
            self._stop(f"rank {rank} failed {failures} runs in a row and the job cannot continue "
                       f"with fewer than {self.min_workers} workers (--min-workers)")
            self._say_every_error()
            return False
        self.slots.remove(slot)
        self.from_same_step = 0  # another job size: its own restarts
        self._restart(f"rank {rank} failed {failures} runs in a row (--slot-failures "
                      f"{self.slot_failures})", step, restart_count,
                      f"continuing with {self.num_workers} workers instead of {self.num_workers + 1} "
                      f"(--min-workers {self.min_workers})")
        return True

    def _restart(self, cause: str, step: Optional[int], restart_count: int, detail: str) -> None:
        self.restarts += 1
        self.start_step = step
        say(f"restarting the job (TFX_RESTART_COUNT={restart_count}): {cause}; "
            f"{self._resume_from(step)}; {detail}")

    def _checkpoint(self, step: Optional[int]) -> str:
        if not self.checkpoint_dir:
            return "unknown (no --checkpoint-dir)"
        return "none yet" if step is None else f"step {step}"

    def _resume_from(self, step: Optional[int]) -> str:
        if not self.checkpoint_dir:
            return "resuming from the job's own checkpoint, if any (no --checkpoint-dir)"
        if step is None:
            return f"step unknown (no {LATEST} in {self.checkpoint_dir} yet)"
        return f"resuming from step {step} ({os.path.join(self.checkpoint_dir, LATEST)})"

    def _stop(self, reason: str) -> None:
        say(f"not restarting: {reason}. The runs:")
        sys.stderr.write("".join(f"    {line}\n" for line in self._history))
        sys.stderr.flush()

    def _say_every_error(self) -> None:
        say("the last error of every worker slot that failed:")
        for slot, lines in sorted(self._last_error.items()):
            sys.stderr.write(f"    slot {slot}: " + "\n        ".join(lines) + "\n")
        sys.stderr.flush()
