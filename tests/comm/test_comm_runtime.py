"""Multi-process tests of the collective runtime through its numpy path.

What needs real processes: the rendezvous, authentication, dead and hung
peers, wrong secrets and garbage on the listener, and the numpy path end to
end. Every collective over every transport, rank count, dtype and reduction,
and the negotiation's errors, are tested in one process by the C++ tests
(test_cpp_runtime.py); here one rank count per transport checks the
Python side. Each rank is a real process on 127.0.0.1.
"""

import os
import socket
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import comm_procs as procs  # noqa: E402

WORKER = "comm_worker.py"


@pytest.mark.parametrize("size,transport", [(1, "tcp"), (2, "tcp"), (3, "shm")])
def test_every_collective_matches_numpy(size, transport):
    env = {"TFX_SHM": "1" if transport == "shm" else "0"}
    results = procs.run(WORKER, "collectives", size, env=env, timeout=150)
    for r in results:
        res = r.result
        assert res["checked"] >= 6 * 4 * 6 + 6 + 2 + 4 + size + 1
        want = ["self" if p == r.rank else transport for p in range(size)]
        assert res["transports"] == want


@pytest.mark.reliability
@pytest.mark.parametrize("transport", ["tcp"])
def test_mismatched_shapes_fail_on_every_rank_and_the_communicator_survives(transport, reliability):
    results = procs.run(WORKER, "mismatch", 3, env={"TFX_SHM": "1" if transport == "shm" else "0"})
    for r in results:
        res = r.result
        err = res["mismatch_error"]
        assert err is not None and err.startswith("CollectiveMismatchError"), err
        assert "'grads/0'" in err and "float32[4]" in err and "rank 2 submitted allreduce float32[5]" in err
        assert res["mismatch_s"] < 5
        assert res["after"] == [3.0] * 4
    reliability("bad input: ranks submit one all-reduce with different shapes (3 ranks)",
                "CollectiveMismatchError on every rank naming both shapes; the communicator keeps working",
                max(r.result["mismatch_s"] for r in results), "that collective only")


@pytest.mark.reliability
@pytest.mark.parametrize("scenario,transport,victim", [
    ("die", "tcp", 2), ("die", "shm", 2), ("die", "shm", 0),  # rank 0 is the coordinator
    ("die_mid_ring", "tcp", 2), ("die_mid_ring", "shm", 2), ("hang", "shm", 2)])
def test_a_dead_or_stuck_peer_fails_the_others_within_the_timeout(scenario, transport, victim, reliability):
    timeout = 4.0
    env = {"TFX_SHM": "1" if transport == "shm" else "0", "TFX_TIMEOUT_S": str(timeout)}
    t0 = time.monotonic()
    results = procs.run(WORKER, scenario, 3, arg=str(victim), env=env, timeout=60)
    survivors = [r for r in results if r.rank != victim]
    for r in survivors:
        res = r.result
        assert res["error"] is not None, f"rank {r.rank} did not fail"
        assert f"rank {victim}" in res["error"], res["error"]
        # A dead peer is noticed at once (EOF); a stuck one within the timeout
        # (the coordinator's timeout, plus the ring's own, plus a margin).
        limit = 2 * timeout + 3 if scenario == "hang" else timeout + 2
        assert res["error_after_s"] < limit, res
        if scenario == "hang":
            assert "timed out" in res["error"]
    assert time.monotonic() - t0 < 60
    what = {"die": "is killed between collectives", "die_mid_ring": "is killed in the middle of an all-reduce",
            "hang": "stops (SIGSTOP-like hang) in a collective"}[scenario]
    reliability(f"fault: rank {victim} of 3 {what} ({transport}, TFX_TIMEOUT_S={timeout:g})",
                "every survivor raises an error naming the rank",
                max(r.result["error_after_s"] for r in survivors), "the job (no wrong result)")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_late_peer_leaves_the_request_to_the_runtime_thread(transport):
    # The caller drives the runtime for at most ~1 ms; a peer 50 ms late
    # means the runtime thread finishes the collective.
    results = procs.run(WORKER, "late_peer", 2, env={"TFX_SHM": "1" if transport == "shm" else "0"})
    assert all(r.result["done"] for r in results)
    # Each rank waited for the other, 50 ms late, in 3 of the 6 collectives:
    # the stats count that as waiting, not running.
    for r in results:
        stats = r.result["stats"]
        assert stats["collectives"] == 6, stats
        assert 0.14 <= stats["waiting_s"] < 5, stats
        assert 0 < stats["running_s"] < stats["waiting_s"], stats


@pytest.mark.parametrize("size", [2, 3])
def test_concurrent_callers_in_different_orders_all_complete(size):
    results = procs.run(WORKER, "threads", size, env={"TFX_SHM": "1"})
    for r in results:
        assert r.result["errors"] == [] and len(r.result["ok"]) == 6, r.result


@pytest.mark.parametrize("victim", [0, 2])
def test_a_peer_that_died_while_all_were_idle_fails_the_next_collective(victim):
    timeout = 4.0
    results = procs.run(WORKER, "idle_then_dead", 3, arg=str(victim),
                        env={"TFX_SHM": "1", "TFX_TIMEOUT_S": str(timeout)}, timeout=60)
    for r in results:
        if r.rank == victim:
            continue
        res = r.result
        assert res["error"] is not None and f"rank {victim}" in res["error"], res
        assert res["error_after_s"] < timeout + 3, res


def test_a_collective_the_coordinator_never_makes_times_out_naming_it():
    timeout = 2.0
    results = procs.run(WORKER, "coordinator_never_submits", 3,
                        env={"TFX_SHM": "1", "TFX_TIMEOUT_S": str(timeout)}, timeout=60)
    for r in results:
        res = r.result
        assert res["after"] == [3.0] * 4
        if r.rank == 0:
            continue
        assert res["error"] is not None and res["error"].startswith("CollectiveTimeoutError"), res
        assert "waiting for rank 0 to submit" in res["error"] and "'orphan/0'" in res["error"], res
        assert res["error_after_s"] < timeout + 1.5, res


@pytest.mark.reliability
def test_a_wrong_secret_is_rejected_on_both_sides(reliability):
    results = procs.run(WORKER, "wrong_secret", 2, arg="1", env={"TFX_TIMEOUT_S": "3"}, timeout=30)
    errors = {r.rank: r.error for r in results}
    assert "RendezvousError" in errors[1] and "failed authentication" in errors[1]
    assert "RendezvousError" in errors[0] and "failed authentication" in errors[0]
    assert "TFX_JOB_SECRET" in errors[0] and "TFX_JOB_SECRET" in errors[1]
    reliability("attack: a process with another job secret joins the rendezvous",
                "refused on both sides (RendezvousError: failed authentication, names TFX_JOB_SECRET)",
                None, "nothing (the job does not form)")


@pytest.mark.reliability
def test_garbage_on_the_listener_is_rejected_and_the_listener_keeps_working(reliability):
    addresses = procs.free_addresses(2)
    p0, _ = procs.start(WORKER, "collectives_small", 2, addresses=addresses, ranks=[0])
    host, port = addresses[0].split(":")
    deadline = time.monotonic() + 20
    while True:  # wait for rank 0 to listen
        try:
            s = socket.create_connection((host, int(port)), timeout=1)
            break
        except OSError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + b"\x00" * 64)
    s.settimeout(10)
    try:  # rank 0 drops the connection (a reset when our garbage was left unread)
        assert s.recv(100) == b""
    except ConnectionResetError:
        pass
    s.close()
    p1, _ = procs.start(WORKER, "collectives_small", 2, addresses=addresses, ranks=[1])
    results = procs.wait({**p0, **p1}, timeout=60)
    for r in results:
        assert r.result["transports"][1 - r.rank] in ("shm", "tcp")
    assert "not a tfx_dist handshake" in results[0].stderr
    reliability("attack: HTTP garbage sent to a rank's listener during the rendezvous",
                "connection dropped and logged as not a tfx_dist handshake; the real job then forms and runs",
                None, "nothing")


def test_multi_rank_without_a_secret_says_how_to_set_one(monkeypatch):
    from tfx_dist.comm import Communicator

    monkeypatch.delenv("TFX_JOB_SECRET", raising=False)
    with pytest.raises(ValueError, match="TFX_JOB_SECRET"):
        Communicator(0, 2, ["127.0.0.1:1", "127.0.0.1:2"])


@pytest.mark.reliability
def test_a_missing_peer_fails_the_rendezvous_within_the_timeout_naming_it(reliability):
    # Two jobs of 2 ranks where one rank never starts: rank 0 alone waits for
    # rank 1; rank 1 alone keeps trying to reach rank 0.
    p0, _ = procs.start(WORKER, "collectives_small", 2, env={"TFX_TIMEOUT_S": "2"}, ranks=[0])
    p1, _ = procs.start(WORKER, "collectives_small", 2, env={"TFX_TIMEOUT_S": "2"}, ranks=[1])
    t0 = time.monotonic()
    alone0, alone1 = procs.wait(p0, timeout=30)[0], procs.wait(p1, timeout=30)[0]
    assert time.monotonic() - t0 < 20
    assert "RendezvousError" in alone0.error and "waiting for rank(s) [1]" in alone0.error
    assert "RendezvousError" in alone1.error and "connecting to rank 0" in alone1.error
    reliability("fault: a rank never starts (TFX_TIMEOUT_S=2)",
                "the others fail the rendezvous naming the missing rank", round(time.monotonic() - t0, 2),
                "nothing (the job does not form)")
