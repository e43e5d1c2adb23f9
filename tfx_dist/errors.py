"""The exceptions of tfx_dist's native parts, one hierarchy keyed by one numbering.

Every C API of tfx_dist returns TensorFlow's canonical error codes
(``custom_ops/common/status.h``); :func:`error_from_code` turns one into the
exception whose class says what went wrong: a peer lost
(:class:`UnavailableError`, a ``ConnectionError``), a timeout
(:class:`DeadlineExceededError`, a ``TimeoutError``), bad input
(:class:`InvalidArgumentError`, a ``ValueError``), something unsupported
(:class:`UnimplementedError`), ...

Each part of tfx_dist also has its own base class (``CollectiveError``,
``ServiceError``, ``EmbeddingStoreError``, ``ParameterServerError``): an
:class:`ErrorFamily` makes its errors instances of both, so that
``except CollectiveError`` and ``except TimeoutError`` both catch a collective
that timed out.

TensorFlow-free: importing this module loads nothing.
"""

from __future__ import annotations

# TensorFlow's canonical codes (tensorflow/core/protobuf/error_codes.proto).
OK, CANCELLED, UNKNOWN, INVALID_ARGUMENT, DEADLINE_EXCEEDED, NOT_FOUND, ALREADY_EXISTS = range(7)
PERMISSION_DENIED, RESOURCE_EXHAUSTED, FAILED_PRECONDITION, ABORTED, OUT_OF_RANGE = range(7, 12)
UNIMPLEMENTED, INTERNAL, UNAVAILABLE, DATA_LOSS, UNAUTHENTICATED = range(12, 17)


class TfxError(RuntimeError):
    """A failure reported by tfx_dist's native code; ``code`` is its canonical code."""

    code = UNKNOWN

    def __init__(self, message: str = "", code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class CancelledError(TfxError):
    """The operation was cancelled (SIGINT while waiting)."""

    code = CANCELLED


class UnknownError(TfxError):
    code = UNKNOWN


class InvalidArgumentError(TfxError, ValueError):
    """Bad input: this call's arguments are invalid, whatever the state of the job."""

    code = INVALID_ARGUMENT


class DeadlineExceededError(TfxError, TimeoutError):
    """A timeout: what was waited for did not come in time."""

    code = DEADLINE_EXCEEDED


class NotFoundError(TfxError, LookupError):
    code = NOT_FOUND


class AlreadyExistsError(TfxError):
    code = ALREADY_EXISTS


class PermissionDeniedError(TfxError):
    code = PERMISSION_DENIED


class ResourceExhaustedError(TfxError):
    code = RESOURCE_EXHAUSTED


class FailedPreconditionError(TfxError):
    """The state does not allow the operation (e.g. ranks disagree on a collective)."""

    code = FAILED_PRECONDITION


class MismatchError(FailedPreconditionError):
    """The ranks disagree on a collective (names, shapes, dtypes, ...)."""


class AbortedError(TfxError):
    """Aborted: the communicator or service was broken by an earlier error, or closed."""

    code = ABORTED


class OutOfRangeError(TfxError, IndexError):
    code = OUT_OF_RANGE


class UnimplementedError(TfxError):
    """Unsupported: tfx_dist does not do this."""

    code = UNIMPLEMENTED


class InternalError(TfxError):
    code = INTERNAL


class UnavailableError(TfxError, ConnectionError):
    """A peer was lost: it closed its connection, died or cannot be reached."""

    code = UNAVAILABLE


class DataLossError(TfxError):
    """Data was lost or corrupted (unexpected bytes on a connection, a truncated file)."""

    code = DATA_LOSS


class UnauthenticatedError(TfxError):
    """A peer failed authentication (another job secret)."""

    code = UNAUTHENTICATED


_BY_CODE = {cls.code: cls for cls in (
    CancelledError, UnknownError, InvalidArgumentError, DeadlineExceededError, NotFoundError,
    AlreadyExistsError, PermissionDeniedError, ResourceExhaustedError, FailedPreconditionError,
    AbortedError, OutOfRangeError, UnimplementedError, InternalError, UnavailableError, DataLossError,
    UnauthenticatedError)}


def error_class(code: int) -> type[TfxError]:
    """The class of canonical ``code`` (an unknown code: UnknownError)."""
    return _BY_CODE.get(code, UnknownError)


def error_from_code(code: int, message: bytes | str) -> TfxError:
    """The exception of a failure with canonical ``code`` (not OK) and ``message``."""
    return error_class(code)(_text(message), code)


def _text(message: bytes | str) -> str:
    return message.decode("utf-8", "replace") if isinstance(message, bytes) else message


class ErrorFamily:
    """The errors of one part of tfx_dist, each an instance of the part's base
    class (e.g. ``CollectiveError``) and of the canonical class of its code.

    Args:
      base: the part's base class (a TfxError subclass).
      specific: the part's own subclasses for some codes (e.g.
        ``CollectiveTimeoutError(CollectiveError, DeadlineExceededError)``);
        the other codes get a class named as the base, made once.
    """

    def __init__(self, base: type[TfxError], *specific: type[TfxError]):
        self.base = base
        self._classes = {cls.code: cls for cls in specific}
        _FAMILIES[base] = self

    def error_class(self, code: int) -> type[TfxError]:
        cls = self._classes.get(code)
        if cls is None:
            canonical = error_class(code)
            cls = type(self.base.__name__, (self.base, canonical),
                       {"__module__": self.base.__module__, "__qualname__": self.base.__qualname__,
                        "__doc__": canonical.__doc__, "code": canonical.code, "__reduce__": _reduce})
            self._classes[code] = cls
        return cls

    def error(self, code: int, message: bytes | str) -> TfxError:
        """The exception of a failure of this part with canonical ``code``."""
        return self.error_class(code)(_text(message), code)


_FAMILIES: dict[type, ErrorFamily] = {}


def _reduce(error: TfxError):
    # A class made by ErrorFamily has no importable name: pickled as its family's base and code.
    return _family_error, (type(error).__mro__[1], error.code, str(error))


def _family_error(base: type[TfxError], code: int, message: str) -> TfxError:
    return _FAMILIES[base].error(code, message)


class PeerLostError(UnavailableError):
    """Elastic jobs: a collective or a step failed because a peer was lost (it died, or fell
    silent past ``TFX_TIMEOUT_S``) or the job's membership changed. Never a partial result:
    the collective in flight fails on every survivor. The elastic layer catches it, calls
    ``tfx_dist.elastic.membership.reset()`` and restores the last commit. A collective raises
    it as a ``tfx_dist.comm.CollectivePeerLostError`` (also a ``PeerConnectionError``, the
    error a lost peer raised before)."""


class HostsUpdatedInterrupt(TfxError):
    """Elastic jobs: the driver added or removed workers. Raised by a state's ``commit()`` (or
    ``check_host_updates()``) on every rank at the same commit, so every rank resets there;
    ``skip_sync``: no rank joins, the committed state (equal everywhere) needs no broadcast."""

    code = ABORTED

    def __init__(self, skip_sync: bool = False, message: str = ""):
        super().__init__(message or "the job's workers changed: every rank resets at this commit")
        self.skip_sync = bool(skip_sync)
