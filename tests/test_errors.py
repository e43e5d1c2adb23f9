"""The one exception hierarchy (tfx_dist.errors) and the old names on it: each
part's errors are instances of the part's base class and of their code's class."""

import pickle

import pytest

from tfx_dist import errors


def test_each_code_has_the_class_that_says_what_went_wrong():
    assert isinstance(errors.error_from_code(errors.UNAVAILABLE, "peer lost"), ConnectionError)
    assert isinstance(errors.error_from_code(errors.DEADLINE_EXCEEDED, "timeout"), TimeoutError)
    assert isinstance(errors.error_from_code(errors.INVALID_ARGUMENT, b"bad input"), ValueError)
    assert isinstance(errors.error_from_code(errors.NOT_FOUND, "no row"), LookupError)
    assert isinstance(errors.error_from_code(errors.OUT_OF_RANGE, "id"), IndexError)
    unsupported = errors.error_from_code(errors.UNIMPLEMENTED, "unsupported")
    assert type(unsupported) is errors.UnimplementedError and unsupported.code == 12
    assert str(errors.error_from_code(errors.INVALID_ARGUMENT, b"bad input")) == "bad input"
    assert type(errors.error_from_code(99, "?")) is errors.UnknownError
    assert issubclass(errors.MismatchError, errors.FailedPreconditionError)


def test_collective_errors_keep_their_names_and_gain_their_codes_classes():
    from tfx_dist import comm
    from tfx_dist.comm import _native
    from tfx_dist.comm.collective_errors import COLLECTIVE_ERRORS

    timeout = COLLECTIVE_ERRORS.error(errors.DEADLINE_EXCEEDED, "rank 1 timed out")
    assert type(timeout) is comm.CollectiveTimeoutError
    assert isinstance(timeout, (comm.CollectiveError, errors.DeadlineExceededError, TimeoutError))
    assert isinstance(COLLECTIVE_ERRORS.error(errors.UNAVAILABLE, ""), comm.PeerConnectionError)
    assert isinstance(COLLECTIVE_ERRORS.error(errors.INVALID_ARGUMENT, ""), comm.CollectiveArgumentError)
    mismatch = COLLECTIVE_ERRORS.error(errors.FAILED_PRECONDITION, "")
    assert isinstance(mismatch, (comm.CollectiveMismatchError, errors.MismatchError))
    aborted = COLLECTIVE_ERRORS.error(errors.ABORTED, "closed")
    assert isinstance(aborted, comm.CollectiveError) and isinstance(aborted, errors.AbortedError)
    assert type(aborted).__name__ == "CollectiveError" and aborted.code == errors.ABORTED
    copy = pickle.loads(pickle.dumps(aborted))
    assert type(copy) is type(aborted) and str(copy) == "closed"
    # The library's outcome codes are the canonical ones (its ABI check compares them by name).
    assert _native.STATUS["DEADLINE_EXCEEDED"] == errors.DEADLINE_EXCEEDED == 4
    assert _native.STATUS["UNAVAILABLE"] == errors.UNAVAILABLE == 14


def test_service_store_and_parameter_server_errors_keep_their_names():
    from tfx_dist.comm import service
    from tfx_dist.embedding import store
    from tfx_dist.parameter_server import _native as ps

    assert isinstance(service.SERVICE_ERRORS.error(errors.DEADLINE_EXCEEDED, ""), service.ServiceTimeoutError)
    lost = service.SERVICE_ERRORS.error(errors.UNAVAILABLE, "")
    assert isinstance(lost, (service.ServiceConnectionError, ConnectionError))
    bad = service.SERVICE_ERRORS.error(errors.INVALID_ARGUMENT, "")
    assert type(bad).__name__ == "ServiceError" and isinstance(bad, ValueError)
    for cls in (store.InvalidArgumentError, store.NotFoundError, store.FailedPreconditionError,
                store.OutOfRangeError, store.DataLossError):
        error = store._native.STORE_ERRORS.error(cls.code, "x")
        assert type(error) is cls and isinstance(error, store.EmbeddingStoreError)
        assert isinstance(error, errors.error_class(cls.code))
    lookup = ps.PS_ERRORS.error(errors.UNAVAILABLE, "ps 0 lost")
    assert isinstance(lookup, (ps.ParameterServerError, errors.UnavailableError))
    with pytest.raises(ps.ParameterServerError, match="ps 0 lost"):
        ps.call(_failing_c_function)


def _failing_c_function(err, err_len):
    """Fails as the parameter-server C API does: a canonical code, the message in the caller's buffer."""
    err.value = b"ps 0 lost"
    return errors.UNAVAILABLE
