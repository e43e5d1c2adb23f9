"""The errors of collectives: each a ``CollectiveError`` and an instance of the
``tfx_dist.errors`` class of its code (a timeout is also a DeadlineExceededError,
a TimeoutError)."""

from tfx_dist import errors


class CollectiveError(errors.TfxError):
    """A collective failed; the message names this rank, the peer and the operation.
    Also an instance of the class of its code (e.g. ``tfx_dist.errors.AbortedError``)."""


class CollectiveArgumentError(CollectiveError, errors.InvalidArgumentError):
    """This rank's request is invalid (e.g. all-to-all splits that do not sum
    to the first dimension); raised before any negotiation, on this rank only."""


class CollectiveTimeoutError(CollectiveError, errors.DeadlineExceededError):
    """A peer did not take part in time (``TFX_TIMEOUT_S``)."""


class PeerConnectionError(CollectiveError, errors.UnavailableError):
    """A peer was lost: it closed its connection or died."""


class CollectivePeerLostError(PeerConnectionError, errors.PeerLostError):
    """Elastic jobs: a peer was lost or the membership changed (``tfx_dist.errors.PeerLostError``);
    raised by a communicator made with ``elastic=True`` for what would be a lost peer, a
    timeout or a broken communicator."""


class CollectiveMismatchError(CollectiveError, errors.MismatchError):
    """The ranks disagree on what to reduce (names, shapes, dtypes, ...)."""


COLLECTIVE_ERRORS = errors.ErrorFamily(CollectiveError, CollectiveArgumentError, CollectiveTimeoutError,
                                       PeerConnectionError, CollectiveMismatchError)
