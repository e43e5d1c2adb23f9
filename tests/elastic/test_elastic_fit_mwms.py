"""The done-when of elastic `model.fit` on the native API, with real processes: 3 workers of
tfx_dist.MultiWorkerMirroredStrategy under `tfx-dist-run --elastic --min-workers 2 --max-workers 3`,
`fit` inside `tfx_dist.elastic.run` with `KerasState` and `CommitStateCallback`, worker w1 killed
with SIGKILL mid-epoch.

The two others go on in their own processes with 2 workers, the replacement joins with rank 0's
state, the job exits 0, every example of each epoch is used exactly once, the training step is
traced once per generation (not per step), the weights equal a one-process replay of the
committed steps (no step reduced with a lost worker's partial sum or a stale divisor), and the
accuracy is within noise of the uninterrupted run's (3 workers throughout, replayed on rank 0).
A driver's notice seen by one rank only stops every rank at the same commit (no rank resets alone,
which would cost the others a rollback)."""

import os

import elastic_fit
import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_fit_survives_a_killed_worker_and_grows_back():
    code, done, steps, output, recovery = elastic_job.run_killing_one(
        os.path.join(HERE, "mwms_fit_worker.py"), kill_at_step=10, timeout=420,
        env={"ELASTIC_MODE": "fit"})
    # Lost w1; w3 joined as rank 2; then rank 1 alone saw a (faked) notice: all reset together.
    elastic_fit.check_lost_w1_and_got_w3(code, done, steps, output)
    w0 = done["w0"]
    assert w0["replay_error"] < 1e-4, w0
    assert abs(w0["accuracy"] - w0["uninterrupted_accuracy"]) <= 0.03, w0
    assert w0["accuracy"] == done["w2"]["accuracy"] == done["w3"]["accuracy"]
    print(f"fit: kill to next step {recovery:.2f} s, accuracy {w0['accuracy']:.4f}, uninterrupted "
          f"{w0['uninterrupted_accuracy']:.4f}, replay error {w0['replay_error']:.2e}")
