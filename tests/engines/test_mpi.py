"""mpirun with no TF_CONFIG: the ranks find each other over MPI (mpi4py) and train; and
examples/mpi/run_with_restarts.sh, the loop that reruns a failed mpirun job."""

import json
import os
import re
import subprocess
import sys

import pytest

from fit_job import FIT, REPO_ROOT, check_two_ranks_one_host, fit_env
from workers import mpirun_missing


@pytest.mark.skipif(mpirun_missing() is not None, reason=str(mpirun_missing()))
def test_mpirun_two_ranks_without_tf_config_fit_the_same_model(tmp_path):
    env = fit_env(os.environ)
    env.pop("TFX_JOB_SECRET", None)   # the bootstrap draws one and sends it over MPI
    proc = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "--mca", "btl", "self,tcp", "-x", "PYTHONPATH", "-x", "EPOCHS", "-x", "TFX_TIMEOUT_S",
         sys.executable, FIT], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=120)
    check_two_ranks_one_host(proc)   # one host: the probe finds the shared /dev/shm


@pytest.mark.skipif(mpirun_missing() is not None, reason=str(mpirun_missing()))
def test_the_rerun_loop_restarts_a_preempted_mpirun_job_from_its_checkpoint(tmp_path):
    # Both ranks get a preemption notice 3 steps in (first run only): rank 0 saves, both exit 75.
    env = dict(os.environ, TFX_CHECKPOINT_DIR=str(tmp_path), MAX_RESTARTS="1",
               CRASH="0:0:3:term,0:1:3:term", STEPS="12", STEP_S="0.05")
    env.pop("TFX_RESTART_COUNT", None)
    proc = subprocess.run(
        [os.path.join(REPO_ROOT, "examples", "mpi", "run_with_restarts.sh"), "--allow-run-as-root",
         "--oversubscribe", "-np", "2", "--mca", "btl", "self,tcp", "-x", "CRASH", "-x", "STEPS",
         "-x", "STEP_S", sys.executable, os.path.join(REPO_ROOT, "tests", "engines", "progress_worker.py")],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-3000:])
    restart = re.search(r"run_with_restarts: mpirun exited 75; restart 1 from checkpoint step (\d+)",
                        proc.stderr)
    assert restart, proc.stderr[-3000:]
    saved = int(restart.group(1))
    starts = [json.loads(s) for s in re.findall(r"START (\{.*?\})", proc.stdout)]  # lines may run together
    assert sorted((s["run"], s["step"]) for s in starts) == [(0, 0), (0, 0), (1, saved), (1, saved)]
    assert saved >= 3 and proc.stdout.count('DONE {"step": 12}') == 2
