"""Addresses for jobs started by ``horovodrun --gloo`` without ``TF_CONFIG``.

horovodrun gives each process its rank and the address of its HTTP key-value
store (``HOROVOD_GLOO_RENDEZVOUS_ADDR``/``_PORT``), where Gloo's ranks meet:
``PUT /<scope>/<key>`` stores a value, ``GET /<scope>/<key>`` returns it or
404 until some rank stored it. The ranks meet there the way
`tfx_dist.cluster.mpi_bootstrap` makes them meet over MPI: each publishes its
host's boot id and interface addresses, all pick addresses with
`mpi_bootstrap.choose_addresses`, then each publishes ``host:port``. When
``TFX_JOB_SECRET`` is unset, rank 0 draws one and publishes it in the same
store (which horovodrun serves unauthenticated on the job's network, as it
does for Gloo).
"""

from __future__ import annotations

import json
import os
import secrets
import time
import urllib.error
import urllib.request

from tfx_dist.cluster import mpi_bootstrap
from tfx_dist.cluster.info import ClusterConfigError, from_cluster

_SCOPE = "tfx_dist"


class KeyValueStore:
    """The client of horovodrun's rendezvous store."""

    def __init__(self, host: str, port: int, timeout_s: float):
        self.url = f"http://{host}:{port}/{_SCOPE}"
        self.timeout_s = timeout_s

    def put(self, key: str, value) -> None:
        request = urllib.request.Request(f"{self.url}/{key}", data=json.dumps(value).encode(),
                                         method="PUT")
        urllib.request.urlopen(request, timeout=self.timeout_s).close()

    def get(self, key: str):
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/{key}", timeout=self.timeout_s) as reply:
                    return json.loads(reply.read())
            except urllib.error.HTTPError as e:
                if e.code != 404 or time.monotonic() > deadline:
                    raise ClusterConfigError(f"horovodrun rendezvous: no {key!r} at {self.url} "
                                             f"after {self.timeout_s:.0f}s (HTTP {e.code})") from None
            time.sleep(0.05)

    def allgather(self, key: str, rank: int, size: int, value) -> list:
        self.put(f"{key}.{rank}", value)
        return [self.get(f"{key}.{r}") for r in range(size)]


_horovod_cache = None


def complete_horovod(info, environ):
    """``info`` (from horovodrun's variables) with every rank's address.

    Returns ``info`` unchanged when the environment names no rendezvous store
    (horovodrun started without Gloo). Runs the exchange once per process
    (later calls return the first result).

    Raises:
      ClusterConfigError: a rank did not arrive within ``TFX_TIMEOUT_S``.
    """
    global _horovod_cache
    if _horovod_cache is not None:
        return _horovod_cache
    host, port = environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR"), environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT")
    if not host or not port:
        return info
    from tfx_dist import settings

    store = KeyValueStore(host, int(port), float(settings.get("TFX_TIMEOUT_S")))
    views = store.allgather("host", info.rank, info.num_workers,
                            [mpi_bootstrap._boot_id(),
                             [str(n) for n in mpi_bootstrap.interface_networks()]])
    address = mpi_bootstrap.choose_addresses([tuple(v) for v in views])[info.rank]
    endpoints = store.allgather("endpoint", info.rank, info.num_workers,
                                f"{address}:{mpi_bootstrap._free_port(address)}")
    if not environ.get("TFX_JOB_SECRET"):
        if info.rank == 0:
            store.put("secret", secrets.token_hex(32))
        os.environ["TFX_JOB_SECRET"] = store.get("secret")
    _horovod_cache = from_cluster({"worker": endpoints}, "worker", info.rank, source=info.source,
                                  where="horovodrun rendezvous")
    return _horovod_cache
