"""What the engine tests share: the environment of a fit.py job and the check of its output."""

import json
import os
import sys

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIT = os.path.join(REPO_ROOT, "tests", "multihost", "scripts", "fit.py")
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "multi_worker"))

from workers import free_ports  # noqa: E402,F401  (re-exported)


def fit_env(base: dict, **extra) -> dict:
    """``base`` plus what fit.py needs, without TF_CONFIG (the engine must supply the cluster)."""
    env = dict(base, PYTHONPATH=os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")]),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", EPOCHS="1", TFX_TIMEOUT_S="60")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def check_two_ranks_one_host(proc) -> None:
    """Both ranks reported the same weights and talk over shared memory (one host)."""
    results = [json.loads(line[len("RESULT "):]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert proc.returncode == 0 and len(results) == 2, (proc.stdout[-3000:], proc.stderr[-3000:])
    assert sorted(r["rank"] for r in results) == [0, 1]
    assert results[0]["digest"] == results[1]["digest"]
    assert all(r["transports"][1 - r["rank"]] == "shm" for r in results)
