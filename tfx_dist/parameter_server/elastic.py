"""Parameter servers in an elastic job (``tfx-dist-run --elastic --ps K``): workers come and go,
the servers stay.

A server serves one *session* per generation of workers (the elastic driver
says which, ``DriverClient.next_session``): its tables, the dense variables it
holds and its count of applied steps carry over; the synchronous step barrier
counts the new generation's workers. The step a lost worker left open is
resolved when the next session begins (``parameter_server.h``): applied whole
when any worker ended it (a worker ends a step after the step's all-reduce,
which every worker's pushes precede), dropped with its partial pushes when
none did. So a step's sparse update is on the servers exactly when its dense
update is on the workers: never part of a step, never a step twice. With the
dense variables on the servers a worker's step ends only once the servers
applied it (it pulls the weights): an open step is always dropped.

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
from tfx_dist.elastic import membership
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
    until the driver ends the job; returns the process's exit status (0).

    ``dense_variables="servers"``: a worker's step ends only once the servers applied it (it pulls
    the dense weights), so a step left open is dropped even when a worker ended it."""
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


def pushes_first(grads, pushes):
    """``grads`` (the dense gradients to all-reduce), made to wait for this step's ``pushes``.

    With :func:`tensors_of` on the all-reduce's results (the step ends after them), a worker
    ends a step only once every worker's pushes of it are on the servers: what lets a server
    apply a step that a lost worker left open (see the top of this module).
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
