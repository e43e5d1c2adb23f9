"""Addresses for jobs started by ``mpirun`` without ``TF_CONFIG``, exchanged over MPI.

mpirun tells each process its rank and the job size, not where the other
processes listen. :func:`complete_mpi` completes such a :class:`ClusterInfo`
with every rank's ``host:port``, over MPI itself, with ``mpi4py`` (an optional
dependency: ``pip install mpi4py``). Each rank picks its host's address
(below), binds a free port there, and the ranks ``allgather`` their
``host:port``. If ``TFX_JOB_SECRET`` is unset, rank 0 draws one and broadcasts
it over MPI's own channel (the one ``mpirun`` set up between its processes),
and every rank puts it in its environment.

Which address: every rank lists its host's IPv4 interface addresses
(up, not loopback). Ranks with the same boot id and the same addresses share a
host. If every rank shares one host, 127.0.0.1 is used. Otherwise each rank
takes its address on a subnet that holds an address of every other host, other
than its own (the first such; else its first address): an address that every
host has, like a container bridge's 172.17.0.1, connects nothing.
"""

from __future__ import annotations

import fcntl
import ipaddress
import os
import secrets
import socket
import struct
from typing import List, Optional, Tuple

from tfx_dist.cluster.info import ClusterConfigError, ClusterInfo, Source, from_cluster

_SIOCGIFFLAGS, _SIOCGIFADDR, _SIOCGIFNETMASK = 0x8913, 0x8915, 0x891B
_IFF_UP, _IFF_LOOPBACK = 0x1, 0x8

_mpi_cache: Optional[ClusterInfo] = None


def interface_networks() -> List[ipaddress.IPv4Interface]:
    """This host's IPv4 interface addresses with their networks (up, not loopback), in interface order."""
    found = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        for _, name in socket.if_nameindex():
            request = struct.pack("256s", name.encode()[:15])
            try:
                flags = struct.unpack("H", fcntl.ioctl(sock, _SIOCGIFFLAGS, request)[16:18])[0]
                if not flags & _IFF_UP or flags & _IFF_LOOPBACK:
                    continue
                address = socket.inet_ntoa(fcntl.ioctl(sock, _SIOCGIFADDR, request)[20:24])
                netmask = socket.inet_ntoa(fcntl.ioctl(sock, _SIOCGIFNETMASK, request)[20:24])
            except OSError:   # no IPv4 address on this interface
                continue
            found.append(ipaddress.IPv4Interface(f"{address}/{netmask}"))
    finally:
        sock.close()
    return found


def _boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def choose_addresses(views: List[Tuple[str, List[str]]]) -> List[str]:
    """Each rank's address, from every rank's (boot id, interface addresses "a.b.c.d/len").

    Example:
      >>> choose_addresses([("b1", ["10.0.0.5/24"]), ("b1", ["10.0.0.5/24"])])
      ['127.0.0.1', '127.0.0.1']
      >>> choose_addresses([("b1", ["192.168.1.2/24", "10.0.0.1/8"]), ("b2", ["10.0.0.2/8"])])
      ['10.0.0.1', '10.0.0.2']
    """
    hosts = [(boot, tuple(sorted(addrs))) for boot, addrs in views]
    if len(set(hosts)) == 1:
        return ["127.0.0.1"] * len(views)
    chosen = []
    for rank, (boot, addrs) in enumerate(views):
        if not addrs:
            raise ClusterConfigError(
                f"mpirun bootstrap: rank {rank} has no network address besides loopback, but the "
                f"job spans {len(set(hosts))} hosts")
        others = [[ipaddress.IPv4Interface(a).ip for a in other] for (_, other), key in
                  zip(views, hosts) if key != hosts[rank]]
        mine = {ipaddress.IPv4Interface(a).ip for a in addrs}
        best = addrs[0]
        for candidate in addrs:
            network = ipaddress.IPv4Interface(candidate).network
            # An address that this host has too (a container bridge's) reaches nothing.
            if all(any(ip in network and ip not in mine for ip in other) for other in others):
                best = candidate
                break
        chosen.append(str(ipaddress.IPv4Interface(best).ip))
    return chosen


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def complete_mpi(info: ClusterInfo, environ) -> ClusterInfo:
    """``info`` (from mpirun's variables) with every rank's address, exchanged over MPI.

    Returns ``info`` unchanged when mpi4py is not installed. Runs the exchange
    once per process (later calls return the first result), since every rank
    must make the same MPI calls.
    """
    global _mpi_cache
    if _mpi_cache is not None:
        return _mpi_cache
    try:
        from mpi4py import MPI
    except ImportError:
        return info
    comm = MPI.COMM_WORLD
    if (comm.Get_rank(), comm.Get_size()) != (info.rank, info.num_workers):
        raise ClusterConfigError(
            f"mpirun bootstrap: MPI says rank {comm.Get_rank()} of {comm.Get_size()}, the "
            f"environment rank {info.rank} of {info.num_workers}")
    mine = (_boot_id(), [str(n) for n in interface_networks()])
    addresses = choose_addresses(comm.allgather(mine))
    endpoint = f"{addresses[info.rank]}:{_free_port(addresses[info.rank])}"
    endpoints = comm.allgather(endpoint)
    if not environ.get("TFX_JOB_SECRET"):
        secret = comm.bcast(secrets.token_hex(32) if info.rank == 0 else None, root=0)
        os.environ["TFX_JOB_SECRET"] = secret
    # A port freed by one rank could be taken before the communicator binds it:
    # the rendezvous then names the address it cannot listen on.
    _mpi_cache = from_cluster({"worker": endpoints}, "worker", info.rank, source=Source.MPI,
                              where="mpirun bootstrap")
    return _mpi_cache
