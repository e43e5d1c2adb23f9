"""mpirun with no TF_CONFIG: the ranks find each other over MPI (mpi4py) and train."""

import os
import shutil
import subprocess
import sys

import pytest

from fit_job import FIT, check_two_ranks_one_host, fit_env


def _skip_reason():
    if shutil.which("mpirun") is None:
        return "mpirun not found (scripts/setup.sh installs Debian's openmpi-bin)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed (scripts/setup.sh: pip install mpi4py)"
    return None


@pytest.mark.skipif(_skip_reason() is not None, reason=str(_skip_reason()))
def test_mpirun_two_ranks_without_tf_config_fit_the_same_model(tmp_path):
    env = fit_env(os.environ)
    env.pop("TFX_JOB_SECRET", None)   # the bootstrap draws one and sends it over MPI
    proc = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "--mca", "btl", "self,tcp", "-x", "PYTHONPATH", "-x", "EPOCHS", "-x", "TFX_TIMEOUT_S",
         sys.executable, FIT], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=120)
    check_two_ranks_one_host(proc)   # one host: the probe finds the shared /dev/shm
