"""The rendezvous's errors, in tfx_dist's one exception hierarchy (``tfx_dist.errors``).

A rendezvous that fails is a peer that cannot be reached (:class:`RendezvousError`,
an ``UnavailableError`` and so a ``ConnectionError``); a peer with another
``TFX_JOB_SECRET`` is also an authentication failure
(:class:`UnauthenticatedRendezvousError`, an ``UnauthenticatedError``), still
caught by ``except RendezvousError``.
"""

from __future__ import annotations

from tfx_dist import errors


class RendezvousError(errors.UnavailableError):
    """The processes of the job could not be connected (names the ranks involved)."""

    __module__ = "tfx_dist.comm.rendezvous"   # where users import it from (tracebacks, pickles)


class UnauthenticatedRendezvousError(RendezvousError, errors.UnauthenticatedError):
    """A peer failed authentication: its job secret (TFX_JOB_SECRET) differs from this process's."""

    __module__ = "tfx_dist.comm.rendezvous"
    code = errors.UNAUTHENTICATED
