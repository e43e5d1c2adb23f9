"""Preemption and resume of a Keras fit whose model has a ShardedEmbedding table, at another size.

HybridStrategy (rows sharded over the workers): SIGTERM to rank 1 after step 4 of 2 workers, resumed
on 1 worker. ParameterServerStrategy (rows on the servers): SIGTERM to the launcher of 2 workers and
2 servers after step 4 (it forwards the signal to every process: the servers must keep serving for
the workers' save), resumed with 3 servers. Each ends with the table's rows and the dense weights
of an uninterrupted run on the first size (rtol 1e-5): the checkpoint carries the table's shards
(written by the workers or by the servers into the checkpoint's folder before its rename) and its
optimizer slots, and the table reshards on restore.
"""

import json
import os
import re

import numpy as np
import pytest

from workers import RESULT_PREFIX, launch_script, launch_with_restarts, rank0_report

pytestmark = pytest.mark.reliability

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "preemption_tables.py")


# Six jobs (with servers) are over the suite's budget for new tests: `make reliability` runs them.
@pytest.mark.long
@pytest.mark.parametrize("strategy,first,resumed,stop", [
    ("hybrid", (2, 0), (1, 0), "1:4"), ("ps", (2, 2), (2, 3), "launcher:4")])
def test_tables_resume_at_another_size(strategy, first, resumed, stop, tmp_path, reliability):
    shared = tmp_path / "job"
    shared.mkdir()
    env = {"SHARED": str(shared), "STRATEGY": strategy, "STOP": stop}
    termed, _ = launch_script(SCRIPT, env, *first, grace_period=30)
    log = termed.stdout + termed.stderr
    with open(shared / "ckpt" / "LATEST.json") as f:
        latest = json.load(f)
    saved = latest["step"]
    assert termed.returncode == 75, log[-4000:]
    if stop.startswith("launcher"):  # the launcher forwards the notice: the step is the next agreed one
        assert saved >= 4 and "received SIGTERM; 2 of 4 worker(s) saved and exited 75" in log, log[-4000:]
    else:
        assert saved == 4, log[-4000:]
    for r in range(first[0]):
        assert re.search(rf"\[ *{r}\] .*preempted: saved step {saved} ", log), log[-4000:]
    assert (latest["num_workers"], latest["num_ps"]) == first
    again, _ = launch_script(SCRIPT, env, *resumed)
    assert again.returncode == 0, (again.stdout + again.stderr)[-4000:]
    run = rank0_report(again)
    full = rank0_report(launch_script(SCRIPT, {"SHARED": str(tmp_path / "full"), "STRATEGY": strategy},
                                      *first)[0])
    assert run["start_step"] == saved and full["start_step"] == 0
    np.testing.assert_allclose(run["rows"], full["rows"], rtol=1e-5, atol=1e-6)
    for a, b in zip(run["weights"], full["weights"], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    where = {"hybrid": "workers", "ps": "servers"}[strategy]
    to = "the launcher" if stop.startswith("launcher") else "rank 1"
    reliability(f"Keras fit with a ShardedEmbedding table ({strategy}: rows on the {where}) and "
                f"tfx_dist.BackupAndRestore: SIGTERM to {to} after step 4 on {first[0]} workers, "
                f"{first[1]} servers; rerun on {resumed[0]} workers, {resumed[1]} servers",
                f"every worker saved step {saved} (the servers kept serving for that save) and exited "
                "75; the rerun continued after it with the table resharded; its rows and dense weights "
                "equal an uninterrupted run's (rtol 1e-5)")


def _every_rank_report(result):
    """{rank: the value it reported last} for every worker of a job run by `launch_script`."""
    found = re.findall(rf"^\[ *(\d+)\] {RESULT_PREFIX}(.*)$", result.stdout, re.MULTILINE)
    return {int(r): json.loads(value) for r, value in found}


def test_a_sigterm_to_a_parameter_server_alone_reaches_every_worker(tmp_path, reliability):
    """The engine signals one server (its node is drained): the server writes the notice, the
    launcher passes it on to every worker within a second, they save (the server serving that save)
    and exit 75."""
    shared = tmp_path / "job"
    shared.mkdir()
    env = {"SHARED": str(shared), "STRATEGY": "ps", "STOP": "ps:4"}
    termed, _ = launch_script(SCRIPT, env, 2, 1, grace_period=30)
    log = termed.stdout + termed.stderr
    assert termed.returncode == 75, log[-4000:]
    assert "passing it on to every worker" in termed.stderr, log[-4000:]
    delays = {r: v["notice_after_s"] for r, v in _every_rank_report(termed).items()}
    assert sorted(delays) == [0, 1] and max(delays.values()) < 1.0, delays
    with open(shared / "ckpt" / "LATEST.json") as f:
        latest = json.load(f)
    assert latest["step"] >= 4 and (latest["num_workers"], latest["num_ps"]) == (2, 1), latest
    for r in (0, 1):
        assert re.search(rf"\[ *{r}\] .*preempted: saved step {latest['step']} ", log), log[-4000:]
    reliability("Keras fit with a table on 1 parameter server, 2 workers: SIGTERM to the server alone "
                "after step 4",
                f"the server's notice reached both workers through tfx-dist-run ("
                f"{max(delays.values()) * 1000:.0f} ms at most); they saved step {latest['step']} (the "
                "server serving that save) and exited 75", detected_s=max(delays.values()))


# Three runs of a job with servers, twice: over the suite's budget (`make reliability` runs them).
@pytest.mark.long
@pytest.mark.parametrize("strategy,size", [("ps", (2, 1)), ("hybrid", (2, 0))])
def test_killed_then_preempted_under_max_restarts_ends_as_uninterrupted(
        strategy, size, tmp_path, reliability):
    shared = tmp_path / "job"
    shared.mkdir()
    env = {"SHARED": str(shared), "STRATEGY": strategy, "STOP": "1:5:KILL,0:9"}
    job, wall_s, restarts = launch_with_restarts(SCRIPT, env, shared / "ckpt", *size)
    assert "rank 1 was killed by SIGKILL" in restarts[0] and "resuming from step 3" in restarts[0]
    assert "was preempted (exit code 75)" in restarts[1] and "resuming from step 9" in restarts[1]
    run = rank0_report(job)
    full = rank0_report(launch_script(SCRIPT, {"SHARED": str(tmp_path / "full"), "STRATEGY": strategy},
                                      *size)[0])
    assert run["start_step"] == 9 and full["start_step"] == 0
    np.testing.assert_allclose(run["rows"], full["rows"], rtol=1e-5, atol=1e-6)
    for a, b in zip(run["weights"], full["weights"], strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    reliability(f"Keras fit with a ShardedEmbedding table ({strategy}, {size[0]} workers, {size[1]} "
                "servers) under tfx-dist-run --max-restarts 2: SIGKILL to rank 1 after step 5, SIGTERM "
                "to rank 0 after step 9 of the rerun",
                f"restarted twice (from step 3, then step 9), exit 0 in {wall_s:.0f} s; the table's "
                "rows and dense weights equal an uninterrupted run's (rtol 1e-5)",
                lost="SIGKILL: 2 steps (redone); SIGTERM: 0 steps")
