"""The membership of an elastic job: this process's communicator, one generation at a time.

A *generation* is one membership of the job: the ranks, their addresses and
one communicator among them. When a peer is lost (a collective raises
``tfx_dist.errors.PeerLostError``) or the driver announces workers added or
removed (:func:`pending_change`), every member calls :func:`reset`: it closes
this process's communicator, learns the next generation (from the elastic
driver that ``tfx-dist-run --elastic`` runs; without a driver, the same
members), rendezvouses with it (each connection proves a key derived from the
job secret *and* the generation number, so a straggler of an older generation
is refused), installs the new communicator as the process's and tells the
listeners (:func:`on_reset`: the strategies swap their transport there).

The process's communicator is made by :func:`connect` (strategies and
``tfx_dist.horovod`` call it instead of building a ``Communicator``
themselves): under a driver it is the first generation this worker joins.

Example (a custom loop; ``tfx_dist.elastic``'s ``run`` wraps the same)::

    comm = membership.connect(rank, size, addresses)
    while True:
        try:
            train_steps(membership.communicator())
            break
        except tfx_dist.errors.PeerLostError:
            generation = membership.reset()
            restore_last_commit(broadcast_to=generation.joined)
"""

from __future__ import annotations

import dataclasses
import threading
import time

from tfx_dist import errors, settings
from tfx_dist.elastic.generation import Generation

__all__ = ["Generation", "add_peer_lost_probe", "communicator", "communicator_broken", "connect", "elastic",
           "generation", "is_peer_lost", "on_reset", "pending_change", "remove_listener", "reset"]


@dataclasses.dataclass
class _Current:
    communicator: object
    generation: Generation
    addresses: list
    options: dict


_lock = threading.RLock()
_current: _Current | None = None
_listeners: list = []
_probes: list = []  # more ways a step's error may mean a lost peer (add_peer_lost_probe)
_driver = None  # the DriverClient of this process, made on first use under a driver


def _driver_client():
    """The elastic driver's client, or None when no driver runs this job."""
    global _driver
    if _driver is None and settings.get("TFX_ELASTIC_DRIVER"):
        from tfx_dist.elastic.driver_client import DriverClient

        _driver = DriverClient.from_settings()
    return _driver


def elastic() -> bool:
    """Whether this process runs under the elastic driver (``tfx-dist-run --elastic``)."""
    return bool(settings.get("TFX_ELASTIC_DRIVER"))


def connect(rank: int, size: int, addresses, **options):
    """Builds this process's communicator and makes it the one :func:`reset` replaces.

    Under the elastic driver, ``rank``, ``size`` and ``addresses`` are the
    cluster's first guess only: the driver says which generation this worker
    joins (a replacement joins a running job) and at which rank. ``options``
    are ``Communicator``'s keyword arguments, kept for every later generation.
    """
    from tfx_dist.comm import Communicator

    global _current
    with _lock:
        driver = _driver_client()
        if driver is None:
            members = Generation(0, int(rank), int(size)), list(addresses)
        else:
            members = driver.first_generation(_timeout(options.get("timeout_s")))
        generation, addrs = members
        comm = Communicator(generation.rank, generation.size, addrs, generation=generation.number,
                            elastic=driver is not None, **options)
        _current = _Current(comm, generation, addrs, dict(options))
        if driver is not None:
            driver.began(generation.number)
        return comm


def communicator():
    """This process's communicator (raises if :func:`connect` was not called)."""
    return _require().communicator


def generation() -> Generation:
    """The generation this process is in now."""
    return _require().generation


def pending_change() -> bool:
    """Cheap, never blocks: has the driver announced workers added or removed since this
    generation began? (Horovod's ``check_host_updates``.) Always False without a driver."""
    driver = _driver_client()
    return driver is not None and _current is not None and driver.changed_since(
        _current.generation.number)


def reset(timeout_s: float | None = None, attempts: int = 1) -> Generation:
    """Closes this process's communicator and joins the next generation.

    Every member of the current generation calls it (after a ``PeerLostError``,
    or once :func:`pending_change` said so). Without a driver the next
    generation has the same members, ranks and addresses.

    Args:
      timeout_s: bound on learning the next generation and on its rendezvous;
        default ``TFX_TIMEOUT_S``.
      attempts: how many generations to try: a rendezvous that fails (a member
        lost meanwhile) is followed by the next generation's, up to this many.

    Returns:
      The new :class:`Generation` (rank and size may differ from before).

    Raises:
      PeerLostError: the rendezvous of the next generation failed (a member
        was lost meanwhile): call ``reset`` again.
      RuntimeError: :func:`connect` was not called; or the driver stopped the
        job (fewer workers than ``--min-workers``), or dropped this worker.
    """
    for attempt in range(1, attempts + 1):
        try:
            return _reset_once(timeout_s)
        except errors.PeerLostError:
            if attempt == attempts:
                raise
    raise ValueError(f"Expected attempts >= 1. Received: attempts={attempts}")


def _reset_once(timeout_s: float | None) -> Generation:
    from tfx_dist.comm import Communicator, RendezvousError

    global _current
    with _lock:
        current = _require()
        timeout = _timeout(timeout_s if timeout_s is not None else current.options.get("timeout_s"))
        current.communicator.close()
        driver = _driver_client()
        if driver is None:
            old = current.generation
            new, addrs = Generation(old.number + 1, old.rank, old.size), current.addresses
        else:
            new, addrs = driver.next_generation(current.generation.number, timeout)
        started = time.monotonic()
        options = dict(current.options, timeout_s=timeout)
        try:
            comm = Communicator(new.rank, new.size, addrs, generation=new.number, elastic=True, **options)
        except RendezvousError as e:
            # Keep the failed generation's number: the next reset asks past it.
            _current = _Current(_Closed(new), new, addrs, current.options)
            raise errors.PeerLostError(
                f"tfx_dist rank {new.rank}: the rendezvous of generation {new.number} "
                f"({new.size} ranks) failed after {time.monotonic() - started:.1f} s; a member was "
                f"lost meanwhile or is still at another generation. Call reset() again. Cause: {e}"
            ) from e
        _current = _Current(comm, new, addrs, current.options)
        if driver is not None:
            driver.began(new.number)
        listeners = list(_listeners)
    for listener in listeners:
        listener(new, comm)
    return new


def on_reset(listener) -> None:
    """Calls ``listener(generation, communicator)`` after every reset of this process (e.g. a
    strategy swapping its transport). Listeners are called in the order they were added; adding
    one twice adds it once."""
    with _lock:
        if listener not in _listeners:
            _listeners.append(listener)


def remove_listener(listener) -> None:
    with _lock:
        if listener in _listeners:
            _listeners.remove(listener)


def is_peer_lost(error: BaseException) -> bool:
    """Whether ``error`` means a peer was lost or the membership changed: a ``PeerLostError``; or,
    in an elastic job, any error of a step (a collective op inside a ``tf.function`` reports
    its failure through TensorFlow, which may re-raise a lost peer as an ``InternalError``)
    while this process's communicator is broken by a lost peer, a timeout or a closed
    connection (``Communicator.broken_code``: the communicator's state, not the message)."""
    if isinstance(error, errors.PeerLostError):
        return True
    current = _current
    if current is None or not getattr(current.communicator, "elastic", False):
        return False
    if not isinstance(error, Exception) or isinstance(error, (KeyboardInterrupt, errors.CancelledError)):
        return False
    return communicator_broken() or any(probe(error) for probe in list(_probes))


def communicator_broken() -> bool:
    """Whether this process's communicator is broken by a lost peer, a timeout or a closed
    connection (the runtime's state, ``Communicator.broken_code``)."""
    from tfx_dist.comm.communicator import _PEER_LOST_CODES

    current = _current
    if current is None:
        return False
    broken = getattr(current.communicator, "broken_code", lambda: errors.ABORTED)()
    return broken in _PEER_LOST_CODES


def add_peer_lost_probe(probe) -> None:
    """Adds ``probe(error) -> bool`` to :func:`is_peer_lost`: an error of a step that a lost peer
    causes outside the communicator (a parameter server stopping a session whose worker was
    lost). A probe may wait briefly for the job to confirm the loss; adding one twice adds it once."""
    with _lock:
        if probe not in _probes:
            _probes.append(probe)


def _require() -> _Current:
    if _current is None:
        raise RuntimeError("tfx_dist.elastic.membership: no communicator yet. A strategy or "
                           "tfx_dist.horovod.init() makes it (membership.connect); reset() and "
                           "generation() need one.")
    return _current


def _timeout(timeout_s) -> float:
    return float(settings.get("TFX_TIMEOUT_S", timeout_s))


class _Closed:
    """Stands for the communicator of a generation whose rendezvous failed."""

    elastic = True

    def __init__(self, generation: Generation):
        self.rank, self.size, self.generation = generation.rank, generation.size, generation.number

    def close(self) -> None:
        pass


def _forget_for_tests() -> None:
    """Drops the process's communicator and listeners (tests that connect several times)."""
    global _current, _driver
    with _lock:
        if _current is not None:
            _current.communicator.close()
        _current, _driver = None, None
        _listeners.clear()
        _probes.clear()
