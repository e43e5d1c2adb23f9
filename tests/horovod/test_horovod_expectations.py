"""What Horovod 0.28.1's own TensorFlow tests expect of ``hvd``, checked on 2 real processes
under ``python -m tfx_dist.run -n 2`` (``scripts/horovod_expectations.py``): a zero-size
all-to-all and a failed call leave the communicator usable; Horovod's float16 scaling,
integer IndexedSlices average, all-to-all result and reduce-scatter gradient; gradients of
every collective; the in-place, grouped and partial calls; SyncBatchNormalization; the
error kinds; collectives in a ``tf.compat.v1`` graph."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

import workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "horovod_expectations.py")
# Batch normalization's variance is E[x^2] - E[x]^2 across ranks, Keras's E[(x - mean)^2] on one.
LOOSE = ("sync_batch_norm",)


def _same(name, got, expected) -> bool:
    try:
        got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    except (TypeError, ValueError):
        return got == expected
    tolerance = dict(rtol=1e-4, atol=1e-5) if name.startswith(LOOSE) else dict(rtol=1e-6, atol=0)
    return got.shape == expected.shape and bool(np.allclose(got, expected, **tolerance))


def test_horovod_expectations_on_two_processes(tmp_path):
    env = dict(os.environ, PYTHONPATH=workers.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2", RESULT_DIR=str(tmp_path))
    env.pop("TF_CONFIG", None)
    proc = subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", "240", "--",
                           sys.executable, SCRIPT], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    for rank in (0, 1):
        with open(tmp_path / f"result-{rank}.json") as f:
            checks = json.load(f)
        assert len(checks) >= 47, sorted(checks)
        wrong = {name: pair for name, pair in checks.items() if not _same(name, *pair)}
        assert not wrong, f"rank {rank}: " + json.dumps(wrong, indent=1)[:6000]
