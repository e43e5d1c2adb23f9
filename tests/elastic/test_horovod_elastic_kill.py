"""tfx_dist.horovod's elastic API under tfx-dist-run --elastic with TensorFlow: 3 workers, one killed
with SIGKILL mid-epoch; the survivors restore the last commit and go on, a replacement joins with the
state, every example of each epoch is used once, and the job exits 0 with the accuracy of a run
without failures (0.99 on this data; the bound leaves room for noise)."""

import os

import pytest

import elastic_job  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("mode", ["loop", "fit"])
def test_a_killed_worker_costs_no_example(mode):
    code, done, steps, output, recovery = elastic_job.run_killing_one(
        os.path.join(HERE, "horovod_elastic_worker.py"), kill_at_step=10, timeout=400,
        env={"ELASTIC_MODE": mode})
    assert code == 0, output[-5000:]
    assert set(done) == {"w0", "w2", "w3"}, output[-5000:]
    for name, d in done.items():
        assert d["used_per_epoch"] == [[1.0, 1.0]] * 3, (name, d)   # no example lost, none twice
        assert d["accuracy"] > 0.9, (name, d)
    for name in ("w0", "w2"):  # lost w1, then w3 joined and was sent the state
        assert done[name]["resets"] == [[], [2]], (name, done[name])
    print(f"{mode}: recovery {recovery:.2f} s, accuracy {done['w0']['accuracy']:.3f}")
