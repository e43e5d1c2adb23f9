"""``run``: calls a training function again from the last commit after every reset.

Horovod's ``elastic.run`` semantics: the decorated ``func(state, ...)`` runs
after a ``state.sync()``. When a peer is lost (a collective raises
``tfx_dist.errors.PeerLostError``, or, inside a ``tf.function``, any error
while the communicator is broken by a lost peer), every survivor restores its last
commit; when the driver announces workers added or removed
(``HostsUpdatedInterrupt``, raised by a commit on every rank at once), the
state is the commit just made. Then ``membership.reset()`` forms the next
generation, the state's reset callbacks run, the state is synced from rank 0
(the new members receive it), and ``func`` is called again.
"""

from __future__ import annotations

import functools
import logging
import time

from tfx_dist import errors

log = logging.getLogger("tfx_dist.elastic")


def _membership():
    from tfx_dist.elastic import membership

    return membership


def _has_communicator(membership) -> bool:
    try:
        membership.communicator()
    except RuntimeError:
        return False
    return True


def run(func):
    """Decorates ``func(state, *args, **kwargs)`` to go on through resets (see the module).

    Returns what ``func`` returns once it returns. An error that is not a lost
    peer or a membership change ends the call as usual; a reset that fails
    because another peer was lost meanwhile is tried again.
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        membership = _membership()
        skip_sync = False
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except errors.HostsUpdatedInterrupt as e:
                skip_sync = e.skip_sync
                cause = "workers added or removed"
            except Exception as e:  # noqa: BLE001: only a lost peer is caught, the rest re-raised
                # By the communicator's state, not the error's class or text: TensorFlow
                # re-raises a collective's UNAVAILABLE inside a function as an InternalError
                # ("... originally returned UnavailableError ..."), but the runtime broke the
                # communicator before it failed the collective (membership.is_peer_lost).
                if not membership.is_peer_lost(e):
                    raise
                state.restore()
                skip_sync, cause = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            generation = _reset(membership, cause)
            if generation is not None and generation.joined:
                skip_sync = False
            state.on_reset()

    return wrapper


def _reset(membership, cause: str):
    """``membership.reset()``; under the driver, again while the next generation's rendezvous
    loses a peer (the driver stops the job below its minimum of workers)."""
    if not _has_communicator(membership):
        return None
    started = time.monotonic()
    while True:
        try:
            generation = membership.reset()
        except errors.PeerLostError as e:
            if not membership.elastic():  # the same members again: a lost one will not come back
                raise
            log.warning("tfx_dist.elastic: the reset failed (%s); trying again", e)
            continue
        log.warning("tfx_dist.elastic: reset after %s: generation %d, rank %d of %d (%.2f s)", cause,
                    generation.number, generation.rank, generation.size, time.monotonic() - started)
        return generation
