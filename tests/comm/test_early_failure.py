"""Without a launcher, a rank that fails while its Communicator is being built
(between arming the early-failure hook and finishing its rendezvous) stops
rank 0 at once: real processes on loopback (early_failure_worker.py),
TFX_TIMEOUT_S=60 so that waiting it out would fail the test.

Resolving the cluster has no side effects: the hook is armed by whoever
creates the Communicator (the strategy), not by ``tfx_dist.cluster.resolve()``.
So a script that raises after ``resolve()`` and before its strategy, like a
SIGKILLed rank, tells nobody: rank 0 learns it at the timeout, and the last
cases record that."""

import json

import pytest

import comm_procs as procs

WORKER = "early_failure_worker.py"


def _time_of(rank, prefix) -> float:
    for line in rank.stdout.splitlines():
        if line.startswith(prefix + " "):
            return float(line.split()[1])
    raise AssertionError(f"rank {rank.rank} printed no {prefix} (rc {rank.returncode}):\n{rank.stdout}\n"
                         f"{rank.stderr[-3000:]}")


def _run(scenario, timeout_s):
    rank_0, rank_1 = procs.run(WORKER, scenario, 2, env={"TFX_TIMEOUT_S": str(timeout_s)},
                               timeout=timeout_s + 60)
    assert rank_0.returncode == 3, (rank_0.stdout, rank_0.stderr[-3000:])
    error = json.loads(rank_0.error)
    detected = error["time"] - _time_of(rank_1, "FAILING")   # since rank 1 failed
    waited = error["time"] - _time_of(rank_0, "CONNECTING")   # since rank 0 began its rendezvous
    return error["message"], detected, waited, rank_1


@pytest.mark.reliability
def test_a_rank_whose_communicator_fails_before_connecting_stops_rank_0_at_once(reliability):
    message, detected, _, rank_1 = _run("bad_setting", 60)
    assert rank_1.returncode == 1, rank_1.stderr[-3000:]  # the exception still ends rank 1 as usual
    assert "Traceback" in rank_1.stderr, rank_1.stderr[-3000:]
    assert "rank 1 failed before it could connect" in message, message
    assert "TFX_COMM_FUSION_BYTES" in message, message
    assert detected < 5, f"rank 0 failed {detected:.1f} s after rank 1 (TFX_TIMEOUT_S is 60 s)"
    reliability("fault: without the launcher, rank 1 fails before connecting: a setting only it has "
                "is invalid (TFX_COMM_FUSION_BYTES=-5)",
                f"it tells rank 0 (authenticated ABORT), which fails at once: {message[:160]}",
                round(max(detected, 0.0), 3), "the job (as it must)")


@pytest.mark.reliability
def test_a_script_raising_before_its_strategy_is_seen_at_the_timeout(reliability):
    message, detected, waited, rank_1 = _run("script_raises", 4)
    assert "ARMED False" in rank_1.stdout, rank_1.stdout  # resolve() armed nothing
    assert rank_1.returncode == 1 and "FileNotFoundError" in rank_1.stderr, rank_1.stderr[-3000:]
    assert "timed out waiting for rank(s) [1]" in message, message
    assert waited > 3.5, f"rank 0 gave up after {waited:.1f} s of its 4 s"
    reliability("fault: without the launcher, rank 1's script raises after resolve(), before its "
                "strategy (TFX_TIMEOUT_S=4)",
                f"no communicator armed the hook: rank 0 fails at the timeout naming the rank: "
                f"{message[:120]}", round(detected, 3), "the job, after TFX_TIMEOUT_S")


@pytest.mark.reliability
def test_a_rank_killed_before_connecting_is_seen_at_the_timeout(reliability):
    message, detected, waited, _ = _run("killed", 4)
    assert "timed out waiting for rank(s) [1]" in message, message
    assert waited > 3.5, f"rank 0 gave up after {waited:.1f} s of its 4 s"
    reliability("fault: without the launcher, rank 1 is SIGKILLed before connecting (TFX_TIMEOUT_S=4)",
                f"nothing can tell rank 0: it fails at the timeout naming the rank: {message[:140]}",
                round(detected, 3), "the job, after TFX_TIMEOUT_S")
