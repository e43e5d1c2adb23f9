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

from workers import launch_script, rank0_report

# Six jobs (with servers) are over the suite's budget for new tests: `make reliability` runs them.
pytestmark = [pytest.mark.reliability, pytest.mark.long]

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "preemption_tables.py")


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
    if stop.startswith("launcher"):  # the launcher forwards the notice: the step is the next agreed one
        assert termed.returncode == 128 + 15 and saved >= 4, log[-4000:]
        assert "received SIGTERM; stopped all 4 worker(s)" in log, log[-4000:]
    else:
        assert termed.returncode == 75 and saved == 4, log[-4000:]
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
