"""Ranks from the environments of horovodrun, mpirun and SLURM's srun.

These launchers tell each process its rank, the job size and its rank on the
host, but not the other processes' addresses: a :class:`ClusterInfo` from here
has ``cluster``, ``worker_addresses`` and ``address`` set to ``None``, and the
addresses are exchanged later through a rendezvous.
"""

from __future__ import annotations

import re
from typing import List, Mapping, Optional, Tuple

from tfx_dist.cluster.info import ClusterConfigError, ClusterInfo, Source

# (rank, size, local rank, local size) variables of each launcher, in the order
# they are tried. Horovod comes first: horovodrun may itself start processes
# with mpirun, which then sets the MPI variables too.
HOROVOD_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE")
OPEN_MPI_VARS = ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                 "OMPI_COMM_WORLD_LOCAL_SIZE")
PMI_VARS = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS")  # MPICH, Intel MPI


def _int(environ: Mapping[str, str], name: str) -> Optional[int]:
    text = environ.get(name)
    if text is None or text == "":
        return None
    try:
        return int(text)
    except ValueError:
        raise ClusterConfigError(f"{name}: expected an integer, received {text!r}") from None


def _ranks(environ: Mapping[str, str], names: Tuple[str, str, str, str], source: Source,
           local_size: Optional[int] = None,
           hosts: Optional[Tuple[str, ...]] = None) -> Optional[ClusterInfo]:
    """Builds a ClusterInfo from (rank, size, local rank, local size) variables, or None if unset.

    ``local_size``, when given, replaces the fourth variable.
    """
    rank_name, size_name, local_rank_name, local_size_name = names
    rank, size = _int(environ, rank_name), _int(environ, size_name)
    if rank is None or size is None:
        return None
    if size < 1 or not 0 <= rank < size:
        raise ClusterConfigError(f"{rank_name}={rank} and {size_name}={size}: expected "
                                 f"{size_name} >= 1 and 0 <= {rank_name} < {size_name}")
    local_rank = _int(environ, local_rank_name)
    if local_size is None:
        local_size = _int(environ, local_size_name)
    if local_rank is not None and local_size is not None and not 0 <= local_rank < local_size <= size:
        raise ClusterConfigError(
            f"{local_rank_name}={local_rank} and {local_size_name}={local_size}: expected "
            f"0 <= {local_rank_name} < {local_size_name} <= {size_name} ({size})")
    return ClusterInfo(source=source, task_type="worker", task_index=rank, rank=rank,
                       num_workers=size, is_chief=rank == 0, local_rank=local_rank,
                       local_size=local_size, hosts=hosts)


def from_horovod_env(environ: Mapping[str, str]) -> Optional[ClusterInfo]:
    """Ranks from horovodrun (HOROVOD_RANK, HOROVOD_SIZE, HOROVOD_LOCAL_RANK, HOROVOD_LOCAL_SIZE), or None."""
    return _ranks(environ, HOROVOD_VARS, Source.HOROVOD)


def from_mpi_env(environ: Mapping[str, str]) -> Optional[ClusterInfo]:
    """Ranks from mpirun: Open MPI's OMPI_COMM_WORLD_*, else MPICH/Intel MPI's PMI_*, or None."""
    return _ranks(environ, OPEN_MPI_VARS, Source.MPI) or _ranks(environ, PMI_VARS, Source.MPI)


def from_slurm_env(environ: Mapping[str, str]) -> Optional[ClusterInfo]:
    """Ranks from a SLURM job step (srun), or None outside one.

    Reads SLURM_PROCID (rank), SLURM_STEP_NUM_TASKS (size), SLURM_LOCALID
    (local rank), SLURM_STEP_TASKS_PER_NODE with SLURM_NODEID (local size) and
    SLURM_STEP_NODELIST (hosts). Like TensorFlow's SlurmClusterResolver it
    needs the step variables: a batch script itself also has SLURM_PROCID=0,
    and treating it as rank 0 of the allocation would hang the job.
    """
    if _int(environ, "SLURM_PROCID") is None or _int(environ, "SLURM_STEP_NUM_TASKS") is None:
        return None
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST")
    hosts = tuple(expand_hostlist(nodelist)) if nodelist else None
    local_size = None
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE")
    node = _int(environ, "SLURM_NODEID")
    if per_node and node is not None:
        counts = expand_tasks_per_node(per_node)
        if not 0 <= node < len(counts):
            raise ClusterConfigError(f"SLURM_NODEID={node} is out of range for "
                                     f"SLURM_STEP_TASKS_PER_NODE={per_node!r} ({len(counts)} nodes)")
        local_size = counts[node]
    elif per_node and len(set(expand_tasks_per_node(per_node))) == 1:
        local_size = expand_tasks_per_node(per_node)[0]
    # The fourth name is no variable: it names where local_size came from in errors.
    names = ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
             "SLURM_STEP_TASKS_PER_NODE[SLURM_NODEID]")
    return _ranks(environ, names, Source.SLURM, local_size, hosts)


_HOSTLIST_ITEM = re.compile(r"([^,\[]*)(?:\[([^\]]*)\])?([^,\[]*)")


def expand_hostlist(hostlist: str) -> List[str]:
    """Expands a SLURM host list: "node[01-03,7],gpu1" -> node01, node02, node03, node7, gpu1.

    Supports one bracket group per name, ranges that keep zero padding, and
    comma-separated items. (Names with several bracket groups, rare in
    practice, raise ClusterConfigError.)
    """
    hosts: List[str] = []
    pos = 0
    while pos < len(hostlist):
        match = _HOSTLIST_ITEM.match(hostlist, pos)
        prefix, ranges, suffix = match.groups()
        end = match.end()
        if end < len(hostlist) and hostlist[end] != ",":
            raise ClusterConfigError(f"SLURM node list: cannot expand {hostlist!r} at position {end} "
                                     "(expected \"name[1-3,5],other\")")
        if ranges is None:
            if prefix:
                hosts.append(prefix + suffix)
        else:
            for part in ranges.split(","):
                low, _, high = part.partition("-")
                if not low.isdigit() or (high and not high.isdigit()):
                    raise ClusterConfigError(f"SLURM node list: bad range {part!r} in {hostlist!r}")
                width = len(low)
                for n in range(int(low), int(high or low) + 1):
                    hosts.append(f"{prefix}{n:0{width}d}{suffix}")
        pos = end + 1
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """Expands SLURM's tasks-per-node list: "2(x3),1" -> [2, 2, 2, 1]."""
    counts: List[int] = []
    for item in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item.strip())
        if not match:
            raise ClusterConfigError(f"SLURM tasks per node: cannot parse {item!r} in {text!r} "
                                     "(expected \"2(x3),1\")")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    return counts
