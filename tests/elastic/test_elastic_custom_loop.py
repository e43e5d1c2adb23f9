"""The done-when of elastic custom loops, with real processes: 3 workers of
tfx_dist.MultiWorkerMirroredStrategy under `tfx-dist-run --elastic --min-workers 2 --max-workers 3`,
one killed with SIGKILL mid-run. The two others go on in their own processes (same PIDs) with 2
workers, a replacement joins with rank 0's state, the job exits 0, and the weights equal a NumPy
reference on the whole batch: no step reduced with a wrong divisor or a lost worker's partial sum."""

import os

import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))


def test_custom_loop_survives_a_killed_worker_and_grows_back():
    code, done, steps, output, _ = elastic_job.run_killing_one(
        os.path.join(HERE, "tf_elastic_worker.py"), env={"ELASTIC_STEPS": "30"}, timeout=420)
    assert code == 0, output[-5000:]
    assert "worker w1 was killed by SIGKILL" in output and "started worker w3" in output
    assert set(done) == {"w0", "w2", "w3"}, output[-5000:]
    pids = {}
    for name, pid, _, _, _ in steps:
        pids.setdefault(name, set()).add(pid)
    assert all(len(p) == 1 for p in pids.values())
    sizes = {name: {size for n, _, _, _, size in steps if n == name} for name in ("w0", "w2")}
    for name in ("w0", "w2"):
        assert done[name]["pid"] in pids[name]      # the same process before and after the loss
        assert sizes[name] == {2, 3}                 # trained with 3, then 2, then 3 workers again
        first = done[name]["resets"][0]
        assert first[:3] == [1, 0 if name == "w0" else 1, 2] and first[5] % 5 == 0  # rolled back to a commit
    last = {name: d["resets"][-1] for name, d in done.items() if d["resets"]}
    assert all(r[2] == 3 and r[3] == [2] for r in last.values())  # w3 joined as rank 2
    assert len({d["step"] for d in done.values()}) == 1
    for name, d in done.items():
        assert d["error"] < 1e-4, (name, d)         # the one-process trajectory
