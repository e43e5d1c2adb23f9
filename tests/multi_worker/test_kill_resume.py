"""Kill and resume: a 2-worker fit under tfx-dist-run with
tfx_dist.BackupAndRestore, one worker SIGKILLed mid-epoch (the launcher then
kills the job), the same command run again: it resumes from the last epoch
backed up, and with a deterministic input order its final weights equal an
uninterrupted run's."""

import os

import numpy as np
import pytest

from workers import launch_script, rank0_report as _report

pytestmark = pytest.mark.reliability

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "kill_resume.py")


def _launch(shared, kill_at=None):
    return launch_script(SCRIPT, {"SHARED": str(shared), "KILL_AT": kill_at or ""})


def test_a_job_killed_mid_epoch_resumes_to_the_same_weights(tmp_path, reliability):
    killed, killed_s = _launch(tmp_path / "killed", kill_at="1,3")  # epoch 2 of 3, batch 4 of 8
    assert killed.returncode == 128 + 9, f"{killed.stdout[-3000:]}\n{killed.stderr[-3000:]}"
    assert "tfx-dist-run: rank 1 was killed by SIGKILL" in killed.stderr, killed.stderr[-3000:]
    assert (tmp_path / "killed" / "killed").exists()
    resumed, resumed_s = _launch(tmp_path / "killed", kill_at="1,3")  # the same command again
    assert resumed.returncode == 0, f"{resumed.stdout[-3000:]}\n{resumed.stderr[-3000:]}"
    resumed_run = _report(resumed)
    full = _report(_launch(tmp_path / "full")[0])
    reliability("2-worker fit under tfx-dist-run, rank 1 SIGKILLed mid-epoch (epoch 2, batch 4 of 8), "
                "the same command run again with tfx_dist.BackupAndRestore",
                f"the launcher stopped the job ({killed_s:.1f} s in all), exit {killed.returncode}; the rerun "
                f"trained epochs {resumed_run['epochs_trained']} (backup of epoch 1) and its final weights "
                f"equal an uninterrupted run's (allclose)",
                lost="the half epoch since the last backup (redone)")
    assert resumed_run["epochs_trained"] == [1, 2]  # epoch 0 came from the backup
    assert full["epochs_trained"] == [0, 1, 2]
    for a, b in zip(resumed_run["weights"], full["weights"]):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
