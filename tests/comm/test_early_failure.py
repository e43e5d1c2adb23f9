"""Without a launcher, a rank that fails before its rendezvous finished
stops rank 0 at once: real processes on loopback
(early_failure_worker.py), TFX_TIMEOUT_S=60 so that waiting it out would
fail the test. A SIGKILLed rank cannot tell anyone: rank 0 learns it at the
timeout, and the last case records that."""

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
@pytest.mark.parametrize("scenario,expected", [
    ("script_raises", "FileNotFoundError: rank 1: no such file: /data/train-*.tfrecord"),
    ("bad_setting", "TFX_COMM_FUSION_BYTES"),
], ids=["script_raises", "bad_setting"])
def test_a_rank_whose_script_raises_before_connecting_stops_rank_0_at_once(scenario, expected, reliability):
    message, detected, _, rank_1 = _run(scenario, 60)
    assert rank_1.returncode == 1, rank_1.stderr[-3000:]  # the exception still ends rank 1 as usual
    assert "Traceback" in rank_1.stderr, rank_1.stderr[-3000:]
    assert "rank 1 failed before it could connect" in message and expected in message, message
    assert detected < 5, f"rank 0 failed {detected:.1f} s after rank 1 (TFX_TIMEOUT_S is 60 s)"
    what = ("its script raises after the cluster was resolved" if scenario == "script_raises"
            else "a setting only it has is invalid (TFX_COMM_FUSION_BYTES=-5)")
    reliability(f"fault: without the launcher, rank 1 fails before connecting: {what}",
                f"it tells rank 0 (authenticated ABORT), which fails at once: {message[:160]}",
                round(max(detected, 0.0), 3), "the job (as it must)")


@pytest.mark.reliability
def test_a_rank_killed_before_connecting_is_seen_at_the_timeout(reliability):
    message, detected, waited, _ = _run("killed", 4)
    assert "timed out waiting for rank(s) [1]" in message, message
    assert waited > 3.5, f"rank 0 gave up after {waited:.1f} s of its 4 s"
    reliability("fault: without the launcher, rank 1 is SIGKILLed before connecting (TFX_TIMEOUT_S=4)",
                f"nothing can tell rank 0: it fails at the timeout naming the rank: {message[:140]}",
                round(detected, 3), "the job, after TFX_TIMEOUT_S")
