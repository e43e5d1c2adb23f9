"""Which Ray node a failed worker group lost, said first in the error `TfxTrainer.fit` raises.

When a worker's process or its whole node dies, Ray Train's error for that rank is a
failed health check of its actor, with the actor's metadata (node id and IP) buried in
a dump of the worker; the other ranks fail at their next collective, naming the lost
peer's address only. This puts one sentence in front: which rank, on which Ray node
(id and IP), whether the node itself is gone (Ray's GCS marks it dead) or only the
process, and what to do.
"""

from __future__ import annotations

import re
import time
from typing import Dict, List, Tuple

_NODE_ID = re.compile(r"node_id='([0-9a-f]+)'")
_NODE_IP = re.compile(r"node_ip='([^']+)'")
_HEALTH_CHECK = "health check failed"


def lost_ranks(worker_failures: Dict[int, BaseException]) -> Dict[int, Tuple[str, str]]:
    """``{rank: (node_id, node_ip)}`` of the ranks whose actor died (not those whose code raised)."""
    lost = {}
    for rank, failure in worker_failures.items():
        text = str(failure)
        node_id, node_ip = _NODE_ID.search(text), _NODE_IP.search(text)
        if _HEALTH_CHECK in text and node_id and node_ip:
            lost[int(rank)] = (node_id.group(1), node_ip.group(1))
    return lost


def dead_nodes(node_ids, wait_s: float = 20.0) -> set:
    """The nodes among ``node_ids`` that Ray's GCS reports dead, waiting up to ``wait_s`` for it
    to notice (it checks a node's raylet every few seconds)."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        dead = {node["NodeID"] for node in ray.nodes() if not node.get("Alive")} & set(node_ids)
        if dead == set(node_ids) or time.monotonic() > deadline:
            return dead
        time.sleep(1.0)


def explain(worker_failures: Dict[int, BaseException], wait_s: float = 20.0) -> str | None:
    """The sentence naming the lost ranks' nodes and what to do, or None if no actor died."""
    lost = lost_ranks(worker_failures)
    if not lost:
        return None
    dead = dead_nodes({node_id for node_id, _ in lost.values()}, wait_s)
    parts: List[str] = []
    for rank, (node_id, node_ip) in sorted(lost.items()):
        where = f"rank {rank} on Ray node {node_id} ({node_ip})"
        parts.append(f"{where}: the node died" if node_id in dead else
                     f"{where}: its worker process died while the node stayed up (killed, or out of memory)")
    return (f"tfx_dist.ray: the worker group lost {'; '.join(parts)}. The other ranks then failed at "
            f"their next collective. Ray Train restarts the group on the nodes it has while "
            f"RunConfig(failure_config=FailureConfig(max_failures=K)) allows (restarts resume from the "
            f"last tfx_dist.ray.StepCheckpoint); past that, bring the node back or add "
            f"one (`ray start --address=...`) so that the cluster has the CPUs the workers need, and run the "
            f"job again with the same RunConfig(name=..., storage_path=...): its workers get the last "
            f"checkpoint from ray.train.get_checkpoint() and StepCheckpoint resumes at that step.")
