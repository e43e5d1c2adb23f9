"""mpirun with no TF_CONFIG: the ranks find each other over MPI (mpi4py) and train."""

import json
import os
import shutil
import subprocess
import sys

import pytest

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIT = os.path.join(REPO_ROOT, "tests", "multihost", "scripts", "fit.py")


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
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")]),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", EPOCHS="1", TFX_TIMEOUT_S="60")
    for name in ("TF_CONFIG", "TFX_JOB_SECRET"):   # the bootstrap must supply both
        env.pop(name, None)
    proc = subprocess.run(
        ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2",
         "--mca", "btl", "self,tcp", "-x", "PYTHONPATH", "-x", "EPOCHS", "-x", "TFX_TIMEOUT_S",
         sys.executable, FIT], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=120)
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == 2, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert results[0]["digest"] == results[1]["digest"]
    # One host: the probe finds the shared /dev/shm.
    assert all(r["transports"][1 - r["rank"]] == "shm" for r in results)
