"""mpirun with no TF_CONFIG: the ranks find each other over MPI (mpi4py) and train."""

import os
import subprocess
import sys

import pytest

from fit_job import FIT, check_two_ranks_one_host, fit_env
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
