"""tfx-dist-run --elastic with real processes on numpy collectives (no TensorFlow, a few seconds):
3 workers, one killed with SIGKILL mid-run; the two others go on in their own processes, the
launcher starts a replacement that joins with the state, and the job exits 0."""

import os

import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_a_killed_worker_is_replaced_and_the_survivors_keep_their_processes():
    code, done, steps, output, _ = elastic_job.run_killing_one(
        os.path.join(HERE, "numpy_elastic_worker.py"), env={"ELASTIC_STEPS": "120"})
    assert code == 0, output[-4000:]
    assert set(done) == {"w0", "w2", "w3"}, output[-4000:]
    pids = {}
    for name, pid, _, _, _ in steps:
        pids.setdefault(name, set()).add(pid)
    assert all(len(p) == 1 for p in pids.values())           # no worker process restarted
    for name in ("w0", "w2"):
        assert done[name]["pid"] in pids[name]
        # Lost w1: generation 1 of 2 ranks; then w3 joined: generation 2 of 3, rank 2 to be sent the state.
        assert [r[:4] for r in done[name]["resets"]] == [[1, 0 if name == "w0" else 1, 2, []],
                                                         [2, 0 if name == "w0" else 1, 3, [2]]]
        assert done[name]["resets"][0][4] == "CollectivePeerLostError"
    assert ("w3", done["w3"]["pid"], 2, 2, 3) in steps      # the replacement, in generation 2
    assert all(d["wrong"] == 0 and d["step"] == 120 for d in done.values())  # every sum was right
    assert "worker w1 was killed by SIGKILL" in output and "started worker w3" in output
