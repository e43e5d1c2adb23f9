"""The multi-worker example, run the way users run it: under tfx-dist-run."""

import re

from workers import run_example


def test_digits_example_under_the_launcher():
    proc = run_example("train_digits_multiworker.py", "--epochs", "15")
    accuracy = re.search(r"\[0\] final test accuracy: ([0-9.]+)", proc.stdout)
    assert accuracy, proc.stdout[-3000:]
    assert float(accuracy.group(1)) > 0.9
    checksums = set(re.findall(r"weights checksum: (\S+)", proc.stdout))
    assert len(checksums) == 1, checksums  # both workers hold the same weights
