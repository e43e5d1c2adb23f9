"""Parameter servers in an elastic job (``tfx-dist-run --elastic --ps K``): workers come and go,
the servers stay.

A server serves one *session* per generation of workers (the elastic driver
says which, ``DriverClient.next_session``): its tables, the dense variables it
holds and its count of applied steps carry over; the synchronous step barrier
counts the new generation's workers, and the step a lost worker left open is
dropped with its pushes.

The servers follow the elastic state's commits (`_CommitsOnServers`, a
``commit_listeners`` listener): a commit at step k first waits for every
server to have applied step k - 1 (every worker's pushes of it) and opens a
segment of the server's undo log there; after a reset the state's sync brings
its root's commit, and every worker rolls the servers back to it
(``parameter_server.h``). So the tables and the restored state agree for any
commit interval, and every step is applied once.

A worker reconnects at each reset (a ``membership.on_reset`` listener): it
says goodbye to the last session, connects to the new one at its new rank and
asks the servers' step count (SESSION), so a worker that joins reads the
current rows from its first lookup. The service's connections of generation
``g > 0`` prove the generation's key, as the collectives' do.
"""

from __future__ import annotations

import ctypes
import sys
import time
import weakref

from tfx_dist import errors, settings
from tfx_dist.comm.rendezvous import RendezvousError, generation_secret
from tfx_dist.comm.service import ServiceClient, ServiceError, ServiceServer
from tfx_dist.elastic import commit_listeners, membership
from tfx_dist.parameter_server import _native

_NOTE_LEN = 512


def _secret(number: int):
    """The service's key for generation ``number`` (None: the job secret itself)."""
    if not number:
        return None
    return generation_secret(str(settings.get("TFX_JOB_SECRET")).encode("utf-8"), number)


def _say(index: int, message: str) -> None:
    print(f"tfx_dist parameter server {index}: {message}", file=sys.stderr, flush=True)


def serve_sessions(info, synchronous: bool, timeout_s: float, dense_variables: str = "workers") -> int:
    """Serves as parameter server ``info.task_index`` of an elastic job, one session per generation,
    until the driver ends the job; returns the process's exit status (0)."""
    from tfx_dist.elastic.driver_client import DriverClient

    driver = DriverClient.from_settings()
    servers, index = list(info.ps_addresses), info.task_index
    lib = _native.lib()
    server = lib.tfx_ps_server_create(index, len(servers), int(synchronous), timeout_s)
    # Waiting for the next generation may take the driver's wait for replacements.
    wait_s = max(timeout_s, 600.0)
    after = -1
    try:
        while True:
            try:
                number, members = driver.next_session(after, wait_s)
            except errors.AbortedError as e:  # the job ended, or stopped below --min-workers
                _say(index, f"no more workers to serve ({e})")
                return 0
            after = number
            note = ctypes.create_string_buffer(_NOTE_LEN)
            lib.tfx_ps_server_begin(server, len(members), int(dense_variables != "servers"), note, _NOTE_LEN)
            if note.value:
                _say(index, f"generation {number} of {len(members)} worker(s): "
                            f"{note.value.decode('utf-8', 'replace')}")
            _serve_one(lib, server, index, servers, number, members, timeout_s)
    finally:
        lib.tfx_ps_server_destroy(server)


def _serve_one(lib, server: int, index: int, servers, number: int, members, timeout_s: float) -> None:
    labels = [f"worker {name} (rank {rank})" for rank, name in enumerate(members)]
    try:
        service = ServiceServer(index, servers, len(members), secret=_secret(number), timeout_s=timeout_s,
                                abort_on_client_loss=False, client_labels=labels)
    except (RendezvousError, ServiceError) as e:  # a member was lost before it connected
        _say(index, f"generation {number}: its workers did not all connect ({e}); waiting for the next")
        return
    try:
        _native.call(lib.tfx_ps_server_serve, server, service.handle)
    except _native.ParameterServerError as e:  # a worker was lost: its step is resolved next session
        _say(index, f"generation {number} ended: {e}")
    finally:
        service.close()


def connect_client(servers, timeout_s, labels):
    """A worker's service client and parameter-server client for this generation: ``(service,
    ps client id)``."""
    generation, started = membership.generation(), time.monotonic()
    service = ServiceClient(generation.rank, servers, generation.size, secret=_secret(generation.number),
                            timeout_s=timeout_s, server_labels=labels)
    client = int(_native.lib().tfx_ps_client_create(service.handle, len(servers), generation.rank))
    _rejoin(client, service, generation, started, quiet=generation.number == 0)
    return service, client


def _rejoin(client: int, service, generation, started: float, quiet: bool = False) -> None:
    """``client`` joins the servers' session of ``generation`` over ``service``, at their step."""
    _native.call(_native.lib().tfx_ps_client_rejoin, client, service.handle, generation.rank,
                 generation.number)
    if not quiet:
        print(f"tfx_dist worker rank {generation.rank}: parameter servers' session of generation "
              f"{generation.number}, at step {_native.lib().tfx_ps_steps(client)} "
              f"({time.monotonic() - started:.2f} s)", file=sys.stderr, flush=True)


def follow_resets(extended, servers, timeout_s, labels) -> None:
    """Moves ``extended``'s parameter-server client (a `ParameterServerExtended`) to each new
    generation's session: goodbye to the last one, connect at the new rank, the servers' step."""
    ref = weakref.ref(extended)

    def on_reset(generation, communicator):
        target = ref()
        if target is None or target._closed:
            membership.remove_listener(on_reset)
            return
        started = time.monotonic()
        try:
            target._service.close()  # the last session's end (its server may have stopped it)
        except ServiceError:
            pass
        service = ServiceClient(generation.rank, servers, generation.size, secret=_secret(generation.number),
                                timeout_s=timeout_s, server_labels=labels)
        _rejoin(target._ps_client, service, generation, started)
        target._service = service

    membership.on_reset(on_reset)
    membership.add_peer_lost_probe(_servers_lost_a_worker)
    commit_listeners.add(_CommitsOnServers(extended))


class _CommitsOnServers:
    """Follows the elastic state's commits on the servers (a `commit_listeners` listener): each
    commit waits for the servers to have applied this worker's closed steps and marks them there;
    a sync rolls every server back to the commit it brought (its root's)."""

    def __init__(self, extended):
        self._extended = weakref.ref(extended)
        self.held = -1  # the servers' step of this worker's last commit (-1: none yet)
        self._committing = -1

    def _client(self):
        target = self._extended()
        if target is None or target._closed or getattr(target, "_mode", "sync") != "sync":
            return None  # asynchronous pushes are applied on arrival: nothing to go back to
        return target._ps_client

    def committing(self) -> None:
        client = self._client()
        if client is not None:
            self._committing = int(_native.lib().tfx_ps_steps(client))
            _native.call(_native.lib().tfx_ps_client_commit, client, self.held)

    def committed(self) -> None:
        if self._client() is not None:
            self.held = self._committing

    def synced(self, root) -> None:
        """Every rank: the root's commit (its servers' step) to every rank, then every server back
        to it. A root that never committed holds the values it synced: a commit at its step now."""
        import numpy as np

        client = self._client()
        if client is None:
            return
        lib = _native.lib()
        now = int(lib.tfx_ps_steps(client))
        held = np.array([self.held if self.held >= 0 else now], np.int64)
        comm = membership.communicator()
        if comm.size > 1:
            (held,) = comm.broadcast_numpy([held], root=int(root or 0), name="elastic.ps_commit")
        step = int(np.asarray(held).reshape(-1)[0])
        self.held = step  # this rank holds the root's state now, whether the rollback completes or not
        _native.call(lib.tfx_ps_client_rollback, client, step)
        if step != now:
            print(f"tfx_dist worker rank {comm.rank}: parameter servers rolled back from step {now} to the "
                  f"commit at step {step}", file=sys.stderr, flush=True)


def pushes_first(grads, pushes):
    """``grads`` (the dense gradients to all-reduce), made to wait for this step's ``pushes``.

    With :func:`tensors_of` on the all-reduce's results (the step ends after them), a worker
    ends a step only once every worker's pushes of it are on the servers. The rollback to the
    last commit no longer needs that order (a commit waits for the servers' barrier), but
    `ParameterServerExtended` still asks for it.
    """
    import tensorflow as tf

    if not pushes:
        return grads
    with tf.control_dependencies(pushes):
        return [g if g is None else tf.IndexedSlices(tf.identity(g.values), g.indices, g.dense_shape)
                if isinstance(g, tf.IndexedSlices) else tf.identity(g) for g in grads]


def tensors_of(values) -> list:
    """The tensors of a reduction's results (Mirrored values included)."""
    import tensorflow as tf

    out = []
    for value in tf.nest.flatten(values):
        parts = getattr(value, "values", None) if isinstance(value, tf.distribute.DistributedValues) else None
        for part in parts if parts is not None else (value,):
            if isinstance(part, tf.IndexedSlices):
                part = part.values
            if isinstance(part, tf.Tensor):
                out.append(part)
    return out


def _servers_lost_a_worker(error: BaseException) -> bool:
    """A parameter-server op failed with ABORTED or UNAVAILABLE (a server stops a session whose
    worker was lost): a lost peer when the job confirms it within a few seconds (the
    communicator broken, or the driver's notice), not on the error's word alone."""
    code = getattr(error, "error_code", getattr(error, "code", None))
    if code not in (errors.ABORTED, errors.UNAVAILABLE):
        return False
    deadline = time.monotonic() + _CONFIRM_S
    while time.monotonic() < deadline:
        if membership.pending_change() or membership.communicator_broken():
            return True
        time.sleep(0.05)
    return False


_CONFIRM_S = 3.0
