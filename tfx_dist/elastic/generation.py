"""One membership of an elastic job, as a process sees it (``membership.Generation``)."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Generation:
    """One membership of the job, as this process sees it.

    Attributes:
      number: 0 for the first generation, then one more per reset.
      rank: this process's rank in it.
      size: the number of ranks.
      joined: the ranks that hold no state yet (new workers): rank 0 broadcasts it to them.
    """

    number: int
    rank: int
    size: int
    joined: tuple = ()
