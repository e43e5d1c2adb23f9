"""The resolved cluster: one frozen :class:`ClusterInfo` per process.

Terms, as TensorFlow's MultiWorkerMirroredStrategy uses them:

* *task*: one process, named by a task type and an index, e.g. ``worker:1``.
* *all-reduce group*: the tasks that train together: ``chief`` (at most one)
  and every ``worker``. ``ps`` and ``evaluator`` tasks are not in it.
* *rank*: a task's position in the all-reduce group: ``chief:0`` is rank 0 and
  ``worker:i`` is rank ``i + 1`` when a chief exists; otherwise ``worker:i`` is
  rank ``i``. The chief of the job is rank 0.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
from typing import Mapping, Optional, Sequence, Tuple

TASK_TYPES = ("chief", "worker", "ps", "evaluator")
ALLREDUCE_TASK_TYPES = ("chief", "worker")

EXPECTED_TF_CONFIG = ('{"cluster": {"worker": ["host1:port", "host2:port", ...]}, '
                      '"task": {"type": "worker", "index": 0}}')


class ClusterConfigError(ValueError):
    """The cluster description (``TF_CONFIG``, a cluster resolver, launcher variables) is invalid."""


class Source(str, enum.Enum):
    """Where a :class:`ClusterInfo` came from."""

    SINGLE = "single"                      # nothing configured: a cluster of one process
    TF_CONFIG = "tf_config"                # the TF_CONFIG environment variable
    CLUSTER_RESOLVER = "cluster_resolver"  # a tf.distribute.cluster_resolver.ClusterResolver
    HOROVOD = "horovod"                    # horovodrun's HOROVOD_* variables
    MPI = "mpi"                            # mpirun's OMPI_COMM_WORLD_* / PMI_* variables
    SLURM = "slurm"                        # srun's SLURM_* variables


@dataclasses.dataclass(frozen=True)
class ClusterInfo:
    """Where this process sits in the job.

    ``cluster``, ``worker_addresses``, ``address`` and ``ps_addresses`` are
    ``None`` when the source gives ranks but no addresses (Horovod, MPI, SLURM):
    the addresses are then exchanged later through a rendezvous.

    Attributes:
      source: where the description came from.
      task_type: "chief", "worker", "ps" or "evaluator".
      task_index: index of this task within its task type.
      cluster: task type -> addresses ("host:port"), or None.
      rank: position in the all-reduce group (see the module docstring);
        None for "ps" and "evaluator" tasks.
      num_workers: size of the all-reduce group (chief plus workers).
      worker_addresses: addresses of the all-reduce group in rank order (chief
        first, then the workers), or None.
      is_chief: True for rank 0 only (an evaluator is not the chief here,
        unlike ``multi_worker_util.is_chief``, which returns True for it).
      local_rank: rank among the all-reduce tasks on this host, or None when
        unknown. From TF_CONFIG, tasks share a host when the host part of their
        addresses is the same string.
      local_size: number of all-reduce tasks on this host, or None.
      ps_addresses: addresses of the "ps" tasks (empty tuple if none), or None.
      address: this task's address, or None (an evaluator may be absent from
        the cluster, as TensorFlow allows).
      rpc_layer: TF_CONFIG's "rpc_layer" (e.g. "grpc"), or None.
      hosts: host names of the job when known without addresses (SLURM's node
        list), else None.
    """

    source: Source
    task_type: str
    task_index: int
    rank: Optional[int]
    num_workers: int
    is_chief: bool
    cluster: Optional[Mapping[str, Tuple[str, ...]]] = dataclasses.field(default=None, hash=False)
    worker_addresses: Optional[Tuple[str, ...]] = None
    local_rank: Optional[int] = None
    local_size: Optional[int] = None
    ps_addresses: Optional[Tuple[str, ...]] = None
    address: Optional[str] = None
    rpc_layer: Optional[str] = None
    hosts: Optional[Tuple[str, ...]] = None

    @property
    def in_allreduce_group(self) -> bool:
        """True for the chief and the workers, False for "ps" and "evaluator"."""
        return self.rank is not None

    @property
    def is_distributed(self) -> bool:
        """True when more than one process trains."""
        return self.num_workers > 1

    def cluster_dict(self) -> Optional[dict]:
        """``cluster`` as a plain ``{task type: [address, ...]}``, the form ``tf.train.ClusterSpec`` takes."""
        if self.cluster is None:
            return None
        return {job: list(addresses) for job, addresses in self.cluster.items()}

    def tf_config(self) -> str:
        """This task's TF_CONFIG as JSON (for a child process or TensorFlow's own resolver).

        Raises:
          ClusterConfigError: the addresses are not known (Horovod, MPI, SLURM).
        """
        if self.cluster is None:
            raise ClusterConfigError(
                f"Cannot write TF_CONFIG for a cluster resolved from {self.source.value}: its "
                "addresses are not known yet (they come from a rendezvous).")
        return make_tf_config(self.cluster, self.task_type, self.task_index, self.rpc_layer)


def make_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str, task_index: int,
                   rpc_layer: Optional[str] = None) -> str:
    """Returns TF_CONFIG JSON for ``task_type:task_index`` in ``cluster``.

    Example:
      >>> make_tf_config({"worker": ["127.0.0.1:2222"]}, "worker", 0)
      '{"cluster": {"worker": ["127.0.0.1:2222"]}, "task": {"type": "worker", "index": 0}}'
    """
    config = {"cluster": {job: list(addresses) for job, addresses in cluster.items()},
              "task": {"type": task_type, "index": task_index}}
    if rpc_layer:
        config["rpc_layer"] = rpc_layer
    return json.dumps(config)


_HOST_PORT = re.compile(r"^(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]]+)):(?P<port>\d{1,5})$")


def split_address(address: object, where: str = "address",
                  expected_shape: Optional[str] = None) -> Tuple[str, int]:
    """Returns (host, port) of "host:port" or "[ipv6]:port": tfx_dist's one address parser.

    Example:
      >>> split_address("[::1]:2222")
      ('::1', 2222)

    Args:
      where: how the error names the address, e.g. ``TF_CONFIG cluster.worker[1]``.
      expected_shape: shown in the error after what arrived, e.g. `EXPECTED_TF_CONFIG`.

    Raises:
      ClusterConfigError (a ValueError): not "host:port", or a port outside 1-65535.
    """
    match = _HOST_PORT.match(address) if isinstance(address, str) else None
    port = int(match.group("port")) if match else 0
    if not match or not 0 < port < 65536:
        shape = f". Expected shape: {expected_shape}" if expected_shape else ""
        raise ClusterConfigError(
            f"{where}: expected an address \"host:port\" (port 1-65535, IPv6 as \"[::1]:port\"), "
            f"received {address!r}{shape}")
    host = match.group("ipv6") or match.group("host")
    if not match.group("ipv6"):
        _check_host_name(host, address, where,
                         f". Expected shape: {expected_shape}" if expected_shape else "")
    return host, port


# DNS limits (RFC 1035): resolving a longer name fails deep in the idna codec
# with a bare UnicodeError that names neither the address nor where it came from.
_MAX_HOST_CHARS, _MAX_LABEL_CHARS = 253, 63


def _check_host_name(host: str, address: str, where: str, shape: str) -> None:
    shown = address if len(address) <= 80 else address[:50] + "..." + address[-20:]
    if len(host.rstrip(".")) > _MAX_HOST_CHARS:
        raise ClusterConfigError(f"{where}: the host name of {shown!r} has {len(host)} characters; a host "
                                 f"name has at most {_MAX_HOST_CHARS} (DNS){shape}")
    labels = host.rstrip(".").split(".")
    long_label = next((label for label in labels if len(label) > _MAX_LABEL_CHARS), None)
    if long_label is not None:
        raise ClusterConfigError(f"{where}: the host name of {shown!r} has a label of {len(long_label)} "
                                 f"characters ({long_label[:20]!r}...); a label (the part between dots) has "
                                 f"at most {_MAX_LABEL_CHARS} (DNS){shape}")
    if "" in labels:
        raise ClusterConfigError(f"{where}: the host name of {shown!r} has an empty label "
                                 f"(two dots in a row){shape}")


def join_address(host: str, port: int) -> str:
    """The inverse of `split_address`: "host:port", or "[host]:port" for an IPv6 host."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def from_cluster(cluster: object, task_type: object, task_index: object, *, source: Source,
                 where: str, rpc_layer: Optional[str] = None) -> ClusterInfo:
    """Validates a cluster description and places ``task_type:task_index`` in it.

    Follows MultiWorkerMirroredStrategy's rules (``multi_worker_util``): task
    types chief/worker/ps/evaluator only, at most one chief and one evaluator,
    the task's type must be in the cluster (except an evaluator), its index in
    range. Also rejects what TensorFlow only trips over later: malformed or
    duplicate addresses.

    Args:
      where: how the error messages name the input, e.g. "TF_CONFIG".

    Raises:
      ClusterConfigError: naming the field, what arrived and the expected shape.
    """
    def fail(message: str) -> ClusterConfigError:
        return ClusterConfigError(f"{where}: {message}. Expected shape: {EXPECTED_TF_CONFIG}")

    if not isinstance(cluster, Mapping) or not cluster:
        raise fail(f"`cluster` must be a non-empty object mapping task types to lists of "
                   f"addresses, received {cluster!r}")
    normalized = {}
    seen = {}
    for job, addresses in cluster.items():
        if job not in TASK_TYPES:
            hint = " (\"master\" is the old name of \"chief\")" if job == "master" else ""
            raise fail(f"unknown task type {job!r} in `cluster`{hint}; known types are "
                       f"{', '.join(TASK_TYPES)}")
        if isinstance(addresses, str) or not isinstance(addresses, Sequence) or not addresses:
            raise fail(f"`cluster.{job}` must be a non-empty list of \"host:port\" strings, "
                       f"received {addresses!r}")
        for i, address in enumerate(addresses):
            split_address(address, f"{where} `cluster.{job}[{i}]`", EXPECTED_TF_CONFIG)
            if address in seen:
                raise fail(f"duplicate address {address!r}: `cluster.{job}[{i}]` and "
                           f"`cluster.{seen[address]}` (each task needs its own host:port)")
            seen[address] = f"{job}[{i}]"
        normalized[job] = tuple(addresses)
    for job in ("chief", "evaluator"):
        if len(normalized.get(job, ())) > 1:
            raise fail(f"`cluster.{job}` may hold at most one task, received "
                       f"{len(normalized[job])}: {list(normalized[job])}")
    if not any(job in normalized for job in ALLREDUCE_TASK_TYPES):
        raise fail(f"`cluster` has no \"chief\" or \"worker\" task, received jobs "
                   f"{sorted(normalized)}")

    if task_type not in TASK_TYPES:
        hint = " (\"master\" is the old name of \"chief\")" if task_type == "master" else ""
        raise fail(f"unknown `task.type` {task_type!r}{hint}; known types are "
                   f"{', '.join(TASK_TYPES)}")
    if isinstance(task_index, str) and task_index.isdigit():
        task_index = int(task_index)  # TensorFlow's TFConfigClusterResolver accepts "1" too
    if isinstance(task_index, bool) or not isinstance(task_index, int) or task_index < 0:
        raise fail(f"`task.index` must be a non-negative integer, received {task_index!r}")
    if task_type not in normalized and task_type != "evaluator":
        raise fail(f"this task ({task_type}:{task_index}) is not in the cluster: `cluster` has "
                   f"no {task_type!r} entry (it has {sorted(normalized)})")
    if task_type in normalized and task_index >= len(normalized[task_type]):
        raise fail(f"`task.index` {task_index} is out of range: `cluster.{task_type}` has "
                   f"{len(normalized[task_type])} task(s), indices 0..{len(normalized[task_type]) - 1}")

    group = normalized.get("chief", ()) + normalized.get("worker", ())
    rank = None
    if task_type == "chief":
        rank = 0
    elif task_type == "worker":
        rank = task_index + len(normalized.get("chief", ()))
    address = normalized[task_type][task_index] if task_type in normalized else None
    local_rank = local_size = None
    if rank is not None:
        host_of = [split_address(a, where, EXPECTED_TF_CONFIG)[0] for a in group]
        local_size = host_of.count(host_of[rank])
        local_rank = host_of[:rank].count(host_of[rank])
    return ClusterInfo(
        source=source, task_type=task_type, task_index=task_index, rank=rank,
        num_workers=len(group), is_chief=rank == 0, cluster=normalized,
        worker_addresses=group, local_rank=local_rank, local_size=local_size,
        ps_addresses=normalized.get("ps", ()), address=address, rpc_layer=rpc_layer)


def single_process() -> ClusterInfo:
    """The cluster of one when nothing is configured: rank 0 of 1, no addresses."""
    return ClusterInfo(source=Source.SINGLE, task_type="worker", task_index=0, rank=0,
                       num_workers=1, is_chief=True, local_rank=0, local_size=1)
