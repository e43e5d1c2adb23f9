"""Where to stop: the workers agree on one step boundary after a preemption notice.

A notice reaches one worker (one pod is drained) or all of them (the
launcher forwards its SIGTERM), at different moments. Every worker must stop
after the same step and save the same state, or the next collective of those
who go on waits for those who left. So at each step boundary (every
``TFX_PREEMPTION_CHECK_STEPS`` steps) every worker contributes "I got a
notice" to one max all-reduce of a single int32 on the strategy's
communicator; its result, the same on every worker, says whether the job
stops after this step. The cost is one tiny eager collective per check
(BENCHMARKS.md); it runs between steps, in the order every worker calls it.
"""

from __future__ import annotations

import numpy as np

from tfx_dist import settings

# One name for every check: the runtime pairs the k-th call of a name on
# every rank (so reusing it keeps no state per call).
_NAME = "tfx.fault_tolerance.stop"


def communicator_of(strategy):
    """The `tfx_dist.comm.Communicator` joining the strategy's workers, or None with one worker."""
    transport = getattr(getattr(strategy, "extended", None), "_transport", None)
    communicator = getattr(transport, "communicator", None)
    if communicator is None or communicator.size < 2:
        return None
    return communicator


def rank_of(strategy) -> int:
    """This worker's rank among the strategy's workers (0 with one worker)."""
    communicator = communicator_of(strategy)
    return 0 if communicator is None else communicator.rank


def is_chief(strategy) -> bool:
    """Whether this worker writes the checkpoint (TensorFlow's ``should_checkpoint``)."""
    return bool(getattr(getattr(strategy, "extended", None), "should_checkpoint", True))


def wait_for_everyone(strategy, name: str = "tfx.fault_tolerance.saved") -> None:
    """Returns once every worker got here (after the chief's write: then it is complete)."""
    communicator = communicator_of(strategy)
    if communicator is not None:
        communicator.allreduce_numpy([np.zeros(1, np.int32)], "max", name=name)


class StopAgreement:
    """Decides, identically on every worker, whether training stops after this step.

    Args:
      strategy: the training strategy (its communicator carries the check; none
        is needed with one worker).
      every_steps: check every this many steps (default
        ``TFX_PREEMPTION_CHECK_STEPS``); a notice waits at most that many steps.
    """

    def __init__(self, strategy, every_steps: int | None = None):
        self.every_steps = settings.get("TFX_PREEMPTION_CHECK_STEPS", every_steps)
        self._communicator = communicator_of(strategy)
        self._boundaries = 0
        self._flag = np.zeros(1, np.int32)

    @property
    def num_workers(self) -> int:
        return 1 if self._communicator is None else self._communicator.size

    def should_stop(self, noticed: bool) -> bool:
        """Called by every worker at every step boundary, in step order; True on all of them or none."""
        self._boundaries += 1
        if self._boundaries % self.every_steps:
            return False
        if self._communicator is None:
            return bool(noticed)
        self._flag[0] = int(bool(noticed))
        (agreed,) = self._communicator.allreduce_numpy([self._flag], "max", name=_NAME)
        return bool(agreed[0])
