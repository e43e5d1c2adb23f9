"""A typical Horovod Keras script (``scripts/keras_train.py``), unchanged but for the import,
on 2 processes: it reaches the accuracy of a single-process run."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "keras_train.py")
EPOCHS = 12


@pytest.mark.smoke
def test_horovod_keras_script_matches_single_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=workers.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2",
               EPOCHS=str(EPOCHS), WORKDIR=str(tmp_path / "single"))
    env.pop("TF_CONFIG", None)
    os.makedirs(env["WORKDIR"])
    single = subprocess.run([sys.executable, SCRIPT], capture_output=True, text=True,
                            timeout=300, env=env)
    assert single.returncode == 0, single.stderr[-5000:]
    baseline = json.loads([line for line in single.stdout.splitlines()
                           if line.startswith(workers.RESULT_PREFIX)][-1][len(workers.RESULT_PREFIX):])
    assert baseline["size"] == 1

    with open(SCRIPT) as f:
        results = workers.run_workers(f.read(), 2, str(tmp_path / "two"), timeout_s=300,
                                      extra_env={"EPOCHS": EPOCHS})
    r0, r1 = (r.result for r in results)
    assert (r0["size"], r1["size"]) == (2, 2)
    # Broadcast at the start plus averaged gradients: the ranks hold the same weights.
    assert r0["weights_checksum"] == r1["weights_checksum"]
    # MetricAverageCallback: every rank logs the mean over the ranks.
    assert r0["train_accuracy"] == r1["train_accuracy"]
    # LearningRateWarmupCallback: initial_lr / size * (epoch * (size - 1) / warmup + 1), epoch
    # counted at each epoch's end, then initial_lr.
    expected_lr = [0.002 / 2 * (min(e + 1, 3) / 3 + 1) for e in range(EPOCHS)]
    np.testing.assert_allclose(r0["lr"], expected_lr, rtol=1e-5)
    assert r0["accuracy"] >= baseline["accuracy"] - 0.03, (r0["accuracy"], baseline["accuracy"])
    assert r0["accuracy"] > 0.9
    # The checkpoints of rank 0's ModelCheckpoint, one per epoch.
    written = sorted(os.listdir(tmp_path / "two"))
    assert sorted(f"checkpoint-{e}.keras" for e in range(1, EPOCHS + 1)) == \
        [f for f in written if f.endswith(".keras")]


HOROVOD_VENV = os.path.join(workers.REPO_ROOT, "build", "horovod-venv")
REAL_EPOCHS = 4


@pytest.mark.skipif(not os.path.exists(os.path.join(HOROVOD_VENV, "bin", "horovodrun")),
                    reason="real horovodrun absent: build/horovod-venv is made by `make horovod` "
                           "(Horovod 0.28.1 with TensorFlow 2.12, 10 to 25 minutes)")
def test_horovod_keras_script_under_real_horovodrun(tmp_path):
    # horovodrun comes from Horovod's environment (Python 3.11, TensorFlow 2.12); the script
    # runs with this interpreter (TensorFlow 2.21, Keras 3), finding its peers through
    # horovodrun's rendezvous store.
    env = dict(os.environ, PYTHONPATH=workers.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2",
               EPOCHS=str(REAL_EPOCHS), WORKDIR=str(tmp_path))
    for name in ("TF_CONFIG", "TFX_JOB_SECRET"):
        env.pop(name, None)
    done = subprocess.run([os.path.join(HOROVOD_VENV, "bin", "horovodrun"), "--gloo", "-np", "2",
                           "-H", "localhost:2", sys.executable, SCRIPT], capture_output=True,
                          text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    reported = [json.loads(line.split(workers.RESULT_PREFIX, 1)[1])
                for line in done.stdout.splitlines() if workers.RESULT_PREFIX in line]
    r0, r1 = sorted(reported, key=lambda r: r["rank"])
    assert (r0["rank"], r1["rank"], r0["size"], r1["size"]) == (0, 1, 2, 2)
    assert r0["weights_checksum"] == r1["weights_checksum"]
    assert r0["train_accuracy"] == r1["train_accuracy"]
    np.testing.assert_allclose(r0["lr"], [0.002 / 2 * (min(e + 1, 3) / 3 + 1)
                                          for e in range(REAL_EPOCHS)], rtol=1e-5)
    assert r0["accuracy"] > 0.85, r0
    # Only rank 0 wrote checkpoints, one per epoch.
    assert sorted(f for f in os.listdir(tmp_path) if f.endswith(".keras")) == \
        sorted(f"checkpoint-{e}.keras" for e in range(1, REAL_EPOCHS + 1))
