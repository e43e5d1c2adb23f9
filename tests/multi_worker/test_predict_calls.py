"""Collectives of different calls never pair: an error naming both calls, not wrong predictions.

Two real worker processes (``scripts/predict_calls.py``): worker 1's first
``predict`` raises (in a callback) before its first collective and the
script goes on; both then ``predict`` the same probe. Before: worker 0's
first call completed against worker 1's second (Keras all-gathers predict's
outputs across workers; the shapes agree) and both returned the other call's
rows without an error.
"""

import os

import pytest

from workers import start_workers, wait_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "predict_calls.py")


@pytest.mark.reliability
def test_a_call_that_failed_on_one_worker_does_not_pair_with_its_next_call(tmp_path, reliability):
    with open(SCRIPT) as f:
        procs, _ = start_workers(f.read(), 2, str(tmp_path), extra_env={"TFX_TIMEOUT_S": "20"})
    w0, w1 = (r.result for r in wait_workers(procs, 180, kill_on_failure=False))
    assert w1["first"].startswith("RuntimeError"), w1["first"]  # the callback, on worker 1 only
    # Worker 1's failed call must not leave its collectives to be met by its next call: worker 0's
    # first call and worker 1's probe fail, each with an error: the calls' binding names both calls,
    # a worker that left its call early has joined (the other's collectives say so), and the check of
    # the next call's batch counts finds no partner within TFX_TIMEOUT_S.
    for error in (w0["first"], w1["probe"]):
        assert isinstance(error, str), f"returned rows of another call without an error: {error}"
        assert any(why in error for why in ("of different calls met", "have joined",
                                            "DeadlineExceededError")), error
    reliability("fault: worker 1's predict fails before its first collective (a callback); the script goes "
                "on and both workers predict the same probe",
                f"worker 0's first call and worker 1's second fail at once: {w0['first'][:220]}",
                None, "those calls (no wrong predictions)")
