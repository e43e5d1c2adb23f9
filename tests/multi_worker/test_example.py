"""The multi-worker example, run the way users run it: under tfx-dist-run."""

import os
import re
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_digits_example_under_the_launcher():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", "240", "--",
         sys.executable, os.path.join(REPO, "examples", "train_digits_multiworker.py"),
         "--epochs", "15"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    accuracy = re.search(r"\[0\] final test accuracy: ([0-9.]+)", proc.stdout)
    assert accuracy, proc.stdout[-3000:]
    assert float(accuracy.group(1)) > 0.9
    checksums = set(re.findall(r"weights checksum: (\S+)", proc.stdout))
    assert len(checksums) == 1, checksums  # both workers hold the same weights
