"""Checks before and at the start of a worker group, so that a misfit cluster fails with a
sentence that names the node and what to do instead of hanging or failing mid-step."""

from __future__ import annotations

import time
from typing import Dict, List, Sequence

from tfx_dist.errors import MismatchError, ResourceExhaustedError


def check_resources(num_workers: int, cpus_per_worker: float, num_ps: int = 0,
                    cpus_per_ps: float = 1.0) -> None:
    """Raises ResourceExhaustedError when the Ray cluster has too few CPUs for the job.

    Ray itself would wait for them without end (the placement group stays pending).
    """
    import ray

    if not ray.is_initialized():
        ray.init()
    alive = [node for node in ray.nodes() if node.get("Alive")]
    cpus = {_node_name(node): float(node.get("Resources", {}).get("CPU", 0)) for node in alive}
    wanted = num_workers * cpus_per_worker + num_ps * cpus_per_ps
    largest = max(cpus.values(), default=0.0)
    too_big = max(cpus_per_worker, cpus_per_ps if num_ps else 0.0) > largest
    if wanted <= sum(cpus.values()) and not too_big:
        return
    nodes = ", ".join(f"{name}: {count:g} CPU" for name, count in sorted(cpus.items())) or "no node alive"
    job = f"{num_workers} worker(s) x {cpus_per_worker:g} CPU"
    if num_ps:
        job += f" + {num_ps} parameter server(s) x {cpus_per_ps:g} CPU"
    raise ResourceExhaustedError(
        f"tfx_dist.ray: the Ray cluster has too few CPUs for this job: it needs {job} = {wanted:g} CPU "
        f"(at most {largest:g} on one node), and the nodes have {nodes}. Start more nodes "
        f"(`ray start --address=... --num-cpus=N`), give a node more (`--num-cpus`), or ask for fewer "
        f"workers or CPUs per worker (ScalingConfig(num_workers=..., resources_per_worker={{'CPU': ...}})).")


def check_free_cpus_for_servers(num_ps: int, cpus_per_ps: float, wait_s: float = 30.0) -> None:
    """Raises ResourceExhaustedError when the servers' CPUs are not free once the workers hold theirs.

    Ray would wait for them without end. Waits up to ``wait_s`` (the servers of the group
    before a restart may still be giving theirs back).
    """
    import ray

    deadline = time.monotonic() + wait_s
    free = float(ray.available_resources().get("CPU", 0))
    while free < num_ps * cpus_per_ps:
        if time.monotonic() > deadline:
            raise ResourceExhaustedError(
                f"tfx_dist.ray: {num_ps} parameter server(s) x {cpus_per_ps:g} CPU cannot start: the worker "
                f"group holds its CPUs and {free:g} CPU are free in the Ray cluster (waited {wait_s:g} s). "
                f"Add nodes or CPUs, or lower cpus_per_ps (TfxConfig / TfxTrainer); TfxTrainer checks "
                f"this before starting.")
        time.sleep(0.5)
        free = float(ray.available_resources().get("CPU", 0))


def _node_name(node: dict) -> str:
    return f"node {node.get('NodeID', '?')[:12]} ({node.get('NodeManagerAddress', '?')})"


def check_same_tensorflow(workers: Sequence[Dict[str, str]]) -> None:
    """Raises MismatchError when the workers run different TensorFlow, Keras or tfx_dist versions.

    ``workers[i]`` describes rank i: ``node_ip``, ``node_id`` and each package's version.
    Different versions may compute different graphs or refuse each other's messages midway.
    """
    for package in ("tensorflow", "keras", "tfx_dist"):
        seen: Dict[str, List[str]] = {}
        for rank, worker in enumerate(workers):
            seen.setdefault(worker[package], []).append(
                f"rank {rank} on node {worker['node_id'][:12]} ({worker['node_ip']})")
        if len(seen) > 1:
            found = "; ".join(f"{package} {version}: {', '.join(where)}" for version, where in seen.items())
            raise MismatchError(
                f"tfx_dist.ray: the workers run different versions of {package}: {found}. Install the "
                f"same {package} on every node (or pin it in the job's runtime_env, e.g. "
                f"runtime_env={{'pip': ['{package}==...']}}), then start the job again.")
