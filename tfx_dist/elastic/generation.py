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


def member_info(info, generation: Generation, addresses):
    """``info`` (a `tfx_dist.cluster.ClusterInfo`) at this worker's place in ``generation``, whose
    members listen on ``addresses`` (rank order): the rank, the number of workers, the cluster,
    the ranks on this host."""
    addresses = tuple(addresses)
    hosts = [a.rsplit(":", 1)[0] for a in addresses]
    mine = hosts[generation.rank]
    return dataclasses.replace(
        info, task_type="worker", task_index=generation.rank, rank=generation.rank,
        num_workers=generation.size, is_chief=generation.rank == 0, worker_addresses=addresses,
        cluster={"worker": addresses}, address=addresses[generation.rank],
        local_rank=hosts[:generation.rank].count(mine), local_size=hosts.count(mine))
