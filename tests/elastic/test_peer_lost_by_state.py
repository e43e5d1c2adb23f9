"""`tfx_dist.elastic.run` tells a lost peer by the communicator's state, not by an error's text.

TensorFlow re-raises an UNAVAILABLE error of a non-communication op inside a function as an
InternalError whose message says so (the text below is TensorFlow 2.21's). A collective that lost
its peer surfaces that way, but the runtime broke the communicator before it failed the collective,
so the state decides: the same error with a working communicator (a parameter server's lost
connection: a lost server stops the job) is re-raised, as every other error of the step. The
killed-worker tests of this folder cover the real collectives.
"""

import pytest
import tensorflow as tf

from tfx_dist import errors
from tfx_dist.elastic import membership, run_loop

WRAPPED = ("tfx_dist rank 0: all_reduce 'g0.all_reduce.3': connection closed by the peer\n"
           "Executing non-communication op <TfxAllReduce> originally returned UnavailableError, and was "
           "replaced by InternalError to avoid invoking TF network error handling logic.")


class _Communicator:
    elastic = True

    def __init__(self, broken_code: int):
        self._broken_code = broken_code

    def broken_code(self) -> int:
        return self._broken_code


class _State:
    def __init__(self):
        self.events = []

    def sync(self):
        self.events.append("sync")

    def restore(self):
        self.events.append("restore")

    def on_reset(self):
        self.events.append("on_reset")


@pytest.fixture
def communicator(monkeypatch):
    """Sets this process's elastic communicator (broken with a code, or 0: working)."""
    monkeypatch.setenv("TFX_ELASTIC_DRIVER", "127.0.0.1:1")  # as under tfx-dist-run --elastic
    monkeypatch.setattr(run_loop, "_reset", lambda membership, cause: None)

    def set_broken(code: int):
        monkeypatch.setattr(membership, "_current", membership._Current(_Communicator(code), None, [], {}))

    return set_broken


def _first_step_fails():
    calls = []

    @run_loop.run
    def train(state):
        calls.append(len(calls))
        if len(calls) == 1:
            raise tf.errors.InternalError(None, None, WRAPPED)
        return "done"

    return train, calls


@pytest.mark.parametrize("code", [errors.UNAVAILABLE, errors.ABORTED, errors.DEADLINE_EXCEEDED])
def test_a_wrapped_error_with_the_communicator_broken_by_a_lost_peer_resets(communicator, code):
    communicator(code)
    state = _State()
    train, calls = _first_step_fails()
    assert train(state) == "done" and calls == [0, 1]
    assert state.events == ["sync", "restore", "on_reset", "sync"]


def test_the_same_text_with_a_working_communicator_is_re_raised(communicator):
    communicator(0)
    state = _State()
    train, calls = _first_step_fails()
    with pytest.raises(tf.errors.InternalError, match="originally returned UnavailableError"):
        train(state)
    assert calls == [0] and state.events == ["sync"]
