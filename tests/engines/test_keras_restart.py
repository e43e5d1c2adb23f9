"""tfx-dist-run --max-restarts 1 over a real 2-worker Keras fit (tfx_dist.MultiWorkerMirroredStrategy,
tfx_dist.BackupAndRestore): rank 1 SIGKILLs itself mid-epoch in the first run; the launcher stops
rank 0, restarts the job with TFX_RESTART_COUNT=1, and the second run resumes at the epoch backed up
and ends with the weights of an uninterrupted run."""

import os
import subprocess
import sys

import numpy as np
import pytest

from fit_job import REPO_ROOT
from test_kill_resume import _report  # tests/multi_worker: the same worker script's report

pytestmark = pytest.mark.reliability

MULTI_WORKER = os.path.join(REPO_ROOT, "tests", "multi_worker")
SCRIPT = os.path.join(MULTI_WORKER, "scripts", "kill_resume.py")  # KILL_AT: see there


def _launch(shared, *options, **env_vars):
    env = dict(os.environ, SHARED=str(shared), TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([REPO_ROOT, MULTI_WORKER]), **env_vars)
    env.pop("TFX_RESTART_COUNT", None)
    return subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", "240", *options,
                           sys.executable, SCRIPT], capture_output=True, text=True, env=env,
                          cwd=REPO_ROOT, timeout=300)


def test_a_worker_killed_mid_epoch_is_restarted_and_the_fit_ends_as_if_uninterrupted(tmp_path, reliability):
    restarted = _launch(tmp_path / "restarted", "--max-restarts", "1", KILL_AT="1,3")  # epoch 2, batch 4
    assert restarted.returncode == 0, f"{restarted.stdout[-3000:]}\n{restarted.stderr[-3000:]}"
    assert (tmp_path / "restarted" / "killed").exists()  # the first run did die
    lines = [line for line in restarted.stderr.splitlines() if "restarting the job" in line]
    assert len(lines) == 1, restarted.stderr[-3000:]
    assert "(TFX_RESTART_COUNT=1): rank 1 was killed by SIGKILL; " in lines[0]
    resumed = _report(restarted)
    full = _report(_launch(tmp_path / "full"))
    reliability("2-worker Keras fit under tfx-dist-run --max-restarts 1, rank 1 SIGKILLed mid-epoch "
                "(epoch 2, batch 4 of 8), tfx_dist.BackupAndRestore",
                f"the launcher restarted the job at once ({lines[0].split(': ', 1)[1]}); the second run "
                f"trained epochs {resumed['epochs_trained']} and ended with an uninterrupted run's "
                "weights; exit 0", lost="the half epoch since the last backup (redone)")
    assert resumed["epochs_trained"] == [1, 2]  # epoch 0 came from the backup
    assert full["epochs_trained"] == [0, 1, 2]
    for a, b in zip(resumed["weights"], full["weights"]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
