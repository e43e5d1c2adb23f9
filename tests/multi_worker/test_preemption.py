"""Preemption and step-exact resume of a 2-worker Keras fit under tfx-dist-run (one chain of runs).

1. rank 1 gets SIGTERM (twice) after step 6: both workers save step 6 and exit 75;
2. the same command again resumes at step 7; rank 0 is SIGKILLed after step 11: the job stops,
   the last periodic save (every 4 steps) is step 8;
3. a damaged newest checkpoint (truncated file, named by LATEST.json) and a half-written one are
   added: the rerun skips them, resumes at step 9 from step 8's checkpoint and finishes the fit;
   then a custom loop under TensorFlow's PreemptionCheckpointHandler gets SIGTERM on rank 1 after
   4 runs: saved, exit 75;
4. the last rerun's fit has nothing left to train; its custom loop resumes at run 5 and finishes;
and the final weights of both equal an uninterrupted run's (rtol 1e-5): dropout masks, Adam's slots
and the learning-rate schedule's step came back, no batch was trained twice or skipped.
"""

import json
import os
import shutil

import numpy as np
import pytest

from workers import launch_script, launch_with_restarts, rank0_reports as _reports

pytestmark = pytest.mark.reliability

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "preemption_fit.py")


def _launch(shared, stop=""):
    return launch_script(SCRIPT, {"SHARED": str(shared), "STOP": stop})


def _latest(ckpt):
    with open(ckpt / "LATEST.json") as f:
        return json.load(f)


def _damage_newest(ckpt):
    """A newer checkpoint whose file was cut short, named by LATEST.json, and a half-written one."""
    shutil.copytree(ckpt / "ckpt-8", ckpt / "ckpt-12")
    with open(ckpt / "ckpt-12" / "dense.npz", "r+b") as f:
        f.truncate(100)
    latest = dict(_latest(ckpt), step=12, path="ckpt-12")
    with open(ckpt / "LATEST.json", "w") as f:
        json.dump(latest, f)
    shutil.copytree(ckpt / "ckpt-8", ckpt / ".tmp-ckpt-16-999")
    os.remove(ckpt / ".tmp-ckpt-16-999" / "MANIFEST.json")


def test_sigterm_then_sigkill_resume_to_the_uninterrupted_weights(tmp_path, reliability):
    shared = tmp_path / "job"
    ckpt = shared / "ckpt"
    shared.mkdir()
    stops = "1:6:TERM,0:11:KILL,1:4:LOOPTERM"
    termed, term_s = _launch(shared, stop=stops)
    log = termed.stdout + termed.stderr
    assert termed.returncode == 75, log[-4000:]
    for r in (0, 1):
        assert f"[{r}] preempted: saved step 6 (epoch 1, batch 2); exiting with 75" in log, log[-4000:]
    assert _latest(ckpt)["step"] == 6 and _latest(ckpt)["num_workers"] == 2

    killed, _ = _launch(shared, stop=stops)
    assert killed.returncode == 128 + 9, (killed.stdout + killed.stderr)[-4000:]
    assert "resumed from" in killed.stderr and "step 6" in killed.stderr
    assert _latest(ckpt)["step"] == 8  # the periodic save before the kill
    _damage_newest(ckpt)

    # The fit resumes and ends; the custom loop after it is preempted after 4 runs.
    resumed, _ = _launch(shared, stop=stops)
    assert resumed.returncode == 75, (resumed.stdout + resumed.stderr)[-4000:]
    assert "skipping a damaged checkpoint" in resumed.stderr and "ckpt-12" in resumed.stderr
    fit = _reports(resumed)[0]
    assert fit["start_step"] == 8 and fit["trained"] == list(range(9, 17)), fit["trained"]
    assert _latest(shared / "loop_ckpt")["step"] == 4

    # The fit has nothing left (it drops the last epoch's batches); the loop resumes at run 4.
    last, _ = _launch(shared, stop=stops)
    assert last.returncode == 0, (last.stdout + last.stderr)[-4000:]
    refit, loop = _reports(last)
    assert refit["start_step"] == 16 and refit["trained"] == [] and loop["loop_start"] == 4
    assert loop["loop_runs"] == 10

    full_fit, full_loop = _reports(_launch(tmp_path / "full")[0])
    assert full_fit["start_step"] == 0 and full_fit["trained"] == list(range(1, 17))
    for resumed_weights, full_weights in ((fit["weights"], full_fit["weights"]),
                                          (refit["weights"], full_fit["weights"]),
                                          (loop["loop_weights"], full_loop["loop_weights"])):
        for a, b in zip(resumed_weights, full_weights, strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-7)
    reliability("2-worker Keras fit under tfx-dist-run with tfx_dist.BackupAndRestore(save_freq=4): "
                "SIGTERM (twice) to rank 1 after step 6, rerun; SIGKILL to rank 0 after step 11, rerun "
                "with a damaged newest checkpoint; then a custom loop under TensorFlow's "
                "PreemptionCheckpointHandler, SIGTERM to rank 1 after 4 runs, rerun",
                f"SIGTERM: both workers saved step 6 and exited 75 ({term_s:.1f} s in all); SIGKILL: "
                f"resumed at step 9 from the periodic save of step 8, the damaged checkpoint skipped; "
                f"custom loop: saved after run 4, exit 75, resumed at run 5; final weights equal an "
                f"uninterrupted run's (rtol 1e-5)",
                lost="SIGTERM: 0 steps; SIGKILL: the steps since the last periodic save (3)")


_SHUFFLED = {"DROPOUT": "0", "FIT_ONLY": "1", "SHUFFLE": "1"}


@pytest.fixture(scope="module")
def shuffled_full_run(tmp_path_factory):
    """The 3-worker fit with shuffle=True, uninterrupted (its chief draws the same job seed as every
    first run of the same program: Python's generator is seeded by keras.utils.set_random_seed)."""
    shared = tmp_path_factory.mktemp("shuffled_full")
    run = _reports(launch_script(SCRIPT, dict(_SHUFFLED, SHARED=str(shared)), num_workers=3)[0])[-1]
    assert run["start_step"] == 0 and run["trained"] == list(range(1, 17)) and run["seed"]
    return run


def _assert_weights(run, reference):
    for a, b in zip(run["weights"], reference, strict=True):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-5, atol=1e-6)


def test_a_shuffled_fit_preempted_on_3_workers_resumes_on_2(tmp_path, reliability, shuffled_full_run):
    shared = tmp_path / "job"
    shared.mkdir()
    env = dict(_SHUFFLED, SHARED=str(shared), STOP="2:5:TERM")
    termed, _ = launch_script(SCRIPT, env, num_workers=3)
    assert termed.returncode == 75, (termed.stdout + termed.stderr)[-4000:]
    assert _latest(shared / "ckpt")["num_workers"] == 3 and _latest(shared / "ckpt")["step"] == 5
    resumed, _ = launch_script(SCRIPT, env, num_workers=2)
    assert resumed.returncode == 0, (resumed.stdout + resumed.stderr)[-4000:]
    assert "(saved on 3 worker(s)): epoch 1, after batch 1 of it, step 5" in resumed.stderr
    run = _reports(resumed)[-1]
    assert run["start_step"] == 5 and run["trained"] == list(range(6, 17)), run["trained"]
    # The resumed run shuffles each epoch as the first one did: by the seed its checkpoint kept.
    with open(shared / "ckpt" / _latest(shared / "ckpt")["path"] / "MANIFEST.json") as f:
        assert run["seed"] == json.load(f)["extra"]["input_seed"] == shuffled_full_run["seed"]
    _assert_weights(run, shuffled_full_run["weights"])
    reliability("Keras fit (shuffle=True) with tfx_dist.BackupAndRestore preempted (SIGTERM to rank 2) "
                "on 3 workers after step 5, resumed on 2 workers with the same global batch",
                "exit 75, then the 2-worker job continued at step 6 (epoch 1, batch 2) in the same "
                "shuffled order and ended with the weights of the same fit uninterrupted on 3 workers "
                "(rtol 1e-5)")


def test_3_workers_killed_then_preempted_under_max_restarts_end_as_uninterrupted(
        tmp_path, reliability, shuffled_full_run):
    """The chain of the done-when: SIGKILL to rank 1 mid-epoch, then SIGTERM to rank 2 in the rerun;
    tfx-dist-run --max-restarts 2 restarts twice and the job ends 0, shuffled input included."""
    shared = tmp_path / "job"
    shared.mkdir()
    env = dict(_SHUFFLED, SHARED=str(shared), STOP="1:5:KILL,2:10:TERM")
    job, wall_s, restarts = launch_with_restarts(SCRIPT, env, shared / "ckpt", num_workers=3)
    assert "rank 1 was killed by SIGKILL" in restarts[0] and "resuming from step 4" in restarts[0]
    assert "was preempted (exit code 75)" in restarts[1] and "resuming from step 10" in restarts[1]
    run = _reports(job)[-1]  # the third run's: the only one that reached the end
    assert run["start_step"] == 10 and run["trained"] == list(range(11, 17)), run["trained"]
    assert run["seed"] == shuffled_full_run["seed"]
    _assert_weights(run, shuffled_full_run["weights"])
    reliability("3-worker Keras fit (shuffle=True, tfx_dist.BackupAndRestore(save_freq=4)) under "
                "tfx-dist-run --max-restarts 2: SIGKILL to rank 1 after step 5 (epoch 1, batch 2), "
                "SIGTERM to rank 2 after step 10 of the rerun",
                f"restarted twice (from the periodic save of step 4, then from the preemption save of "
                f"step 10), exit 0 in {wall_s:.0f} s; final weights equal the uninterrupted 3-worker "
                "fit's, in the same shuffled order (rtol 1e-5)",
                lost="SIGKILL: 1 step (step 5, redone); SIGTERM: 0 steps")
