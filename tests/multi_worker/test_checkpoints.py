"""Checkpoints and BackupAndRestore with real worker processes."""

import os

import numpy as np

from workers import run_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "checkpoints.py")


def _run(tmp_path, phase, shared, check=True, backup="tfx"):
    with open(SCRIPT) as f:
        return run_workers(f.read(), 2, str(tmp_path / phase), timeout_s=150, check=check,
                           extra_env={"PHASE": phase, "SHARED": str(shared), "BACKUP": backup})


def test_chief_writes_checkpoints_others_use_temp_dirs(tmp_path):
    results = [r.result for r in _run(tmp_path, "checkpoint", tmp_path / "shared")]
    for r in results:
        assert "checkpoint" in r["ckpt_files"]
        assert not [f for f in r["ckpt_files"] if f.startswith("workertemp")]
        assert r["h5_files"] == ["model.weights.h5"]
        assert r["same_after_restore"] and r["same_after_h5"]


def test_keras_backup_and_restore_resumes_a_killed_job(tmp_path):
    # Keras's own callback, unchanged (tfx_dist.BackupAndRestore, now the same
    # callback, is covered by test_keras_files).
    backup = "keras"
    full = [r.result for r in _run(tmp_path, "full", tmp_path / "shared_full", backup=backup)]
    assert full[0]["epochs_run"] == 3 and not full[0]["backup_left"]

    shared = tmp_path / "shared_crash"
    crashed = _run(tmp_path, "crash", shared, check=False, backup=backup)
    assert crashed[1].returncode == 3, "\n".join(r.describe() for r in crashed)
    assert os.path.exists(shared / "backup" / "latest.weights.h5")
    assert not [f for f in os.listdir(shared / "backup") if f.startswith("workertemp")]

    # The restarted job (new processes, new ports) runs only the last epoch (2) ...
    resumed = [r.result for r in _run(tmp_path, "resume", shared, backup=backup)]
    for r in resumed:
        assert r["epochs_run"] == 1
        assert not r["backup_left"]
    # ... and ends where the uninterrupted job ended.
    np.testing.assert_allclose(resumed[0]["loss"], full[0]["loss"][2:], rtol=1e-5)
    for a, b, c in zip(resumed[0]["weights"], resumed[1]["weights"], full[0]["weights"]):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)
