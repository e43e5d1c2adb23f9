"""Parameter-server jobs under `tfx-dist-run --elastic --ps K`, with real processes.

- Workers come and go, the server stays: 3 workers and 1 server (dense variables on the workers,
  or on the server too), worker w1 killed with SIGKILL mid-run; the two others go on in their own
  processes, a replacement joins, the job exits 0, and the table's rows (on the server) and the
  dense weights equal a numpy replay of every step applied once (ps_elastic_worker.py's data do not
  depend on the number of workers). Committed every step, or every 4 steps: then the survivors
  run the steps since their last commit again and the servers (1, or 2 holding the dense
  variables too) roll back to that commit.
- The server's commits and rollbacks in one process (C++: parameter_server_tests).
- A lost server is not a lost worker: the job stops naming it, or restarts with --max-restarts.
- HybridStrategy (tables on the workers) refuses an elastic job, naming the restart path.
"""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))
ROWS, DIM, G, LR = 12, 4, 6, 0.1  # as in ps_elastic_worker.py


def replay(initial_dense, steps, total=None):
    """The table and dense weights after the first ``steps`` SGD steps on global batches of G
    (float64) of the data of a job of ``total`` steps (default ``steps``)."""
    rs = np.random.RandomState(0)
    ids = rs.randint(0, ROWS, ((total or steps) * G, 1)).astype("int64")[:, 0]
    labels = rs.randn((total or steps) * G, 1).astype("float32").astype("float64")
    table = np.zeros((ROWS, DIM))
    kernel, bias = np.array(initial_dense[0], "float64"), np.array(initial_dense[1], "float64")
    for s in range(steps):
        rows, y = ids[s * G:(s + 1) * G], labels[s * G:(s + 1) * G]
        hidden = table[rows]
        grad_out = 2 * (hidden @ kernel + bias - y) / G
        grad_table = np.zeros_like(table)
        np.add.at(grad_table, rows, grad_out @ kernel.T)
        grad_kernel, grad_bias = hidden.T @ grad_out, grad_out.sum(0)
        table -= LR * grad_table
        kernel -= LR * grad_kernel
        bias -= LR * grad_bias
    return table, kernel, bias


@pytest.mark.parametrize("dense,commit_every,servers",
                         [("workers", 1, 1), ("workers", 4, 1), ("servers", 4, 2)])
def test_a_killed_worker_is_replaced_and_the_server_keeps_every_step_once(dense, commit_every, servers):
    steps_total = 30
    # Every 4 steps: killed after step 10, the survivors go back to their commit at step 8 and
    # the servers roll the table (and the dense weights they hold) back from step 10 or 11 to 8.
    env = {"ELASTIC_STEPS": str(steps_total), "ELASTIC_JOIN_AT": "16", "DENSE": dense,
           "COMMIT_EVERY": str(commit_every)}
    code, done, steps, output, _ = elastic_job.run_killing_one(
        os.path.join(HERE, "ps_elastic_worker.py"), kill_at_step=8 if commit_every == 1 else 10, timeout=400,
        extra_args=("--ps", str(servers)), env=env)
    assert code == 0, output[-6000:]
    assert set(done) == {"w0", "w2", "w3"}, output[-6000:]
    pids = {name: {pid for n, pid, *_ in steps if n == name} for name in done}
    # No worker process restarted; the survivors kept theirs. Lost w1: generation 1 of 2 workers;
    # w3 joined: generation 2 of 3.
    assert all(len(p) == 1 for p in pids.values()) and pids["w0"] == {done["w0"]["pid"]}
    assert pids["w2"] == {done["w2"]["pid"]}
    assert [[r[0], r[2]] for r in done["w0"]["resets"]] == [[1, 2], [2, 3]], done["w0"]
    assert done["w2"]["resets"] == [[1, 1, 2], [2, 1, 3]], done["w2"]
    assert any(s[0] == "w3" and s[4] == 3 for s in steps)  # the replacement trained with the others
    table, kernel, bias = replay(done["w0"]["initial_dense"], steps_total)
    for name, d in done.items():
        assert d["step"] == steps_total
        np.testing.assert_allclose(d["rows"], table, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(d["dense"][0], kernel, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(d["dense"][1], bias, rtol=1e-4, atol=1e-5, err_msg=name)
    # The table moved: a lost or doubled step would show in its rows.
    assert np.abs(table).max() > 0.05
    assert "worker w1 was killed by SIGKILL" in output and "started worker w3" in output
    # The server went on through both generations; the replacement joined its session at the
    # step the others were at (16 steps applied), and read the rows there.
    assert output.count("parameter servers' session of generation 2, at step 16") == 3, output[-6000:]
    if commit_every > 1:  # the steps since the commit ran again on the rolled-back table
        assert "parameter servers rolled back from step 1" in output and "to the commit at step 8" in output


def _fake_job(tmp_path, *options):
    """A job of plain Python processes (no TensorFlow): ps0 exits 3 after a moment, the workers wait."""
    script = tmp_path / "job.py"
    script.write_text(
        "import json, os, sys, time\n"
        "task = json.loads(os.environ['TF_CONFIG'])['task']\n"
        "if task['type'] == 'ps':\n"
        "    time.sleep(1.0)\n"
        "    print('server going down on purpose', file=sys.stderr, flush=True)\n"
        "    sys.exit(3)\n"
        "time.sleep(60)\n")
    env = dict(os.environ, PYTHONPATH=elastic_job.ROOT)
    return subprocess.run([sys.executable, "-m", "tfx_dist.run", "--elastic", "--min-workers", "1",
                           "--max-workers", "2", "--ps", "1", *options, sys.executable, str(script)],
                          capture_output=True, text=True, env=env, timeout=120, cwd=elastic_job.ROOT)


def test_a_lost_server_stops_the_job_naming_it_or_restarts_it(tmp_path):
    proc = _fake_job(tmp_path)
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "parameter server ps0 failed with exit code 3, a server and not a worker" in proc.stderr
    assert "server going down on purpose" in proc.stderr
    assert "Run with --max-restarts N" in proc.stderr
    assert "started worker" not in proc.stderr  # not replaced as a worker would be

    proc = _fake_job(tmp_path, "--max-restarts", "1")
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert "restarting the job (TFX_RESTART_COUNT=1): parameter server ps0 was lost; restart 1 of 1" \
        in proc.stderr
    assert proc.stderr.count("a server and not a worker") == 2
    assert "--max-restarts 1 restart(s) are used" in proc.stderr


def test_workers_and_servers_die_with_a_killed_launcher(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import os, sys, time\n"
                      f"open(os.path.join({str(tmp_path)!r}, str(os.getpid())), 'w').close()\n"
                      "time.sleep(120)\n")
    env = dict(os.environ, PYTHONPATH=elastic_job.ROOT)
    launcher = subprocess.Popen([sys.executable, "-m", "tfx_dist.run", "--elastic", "-n", "2", "--ps", "1",
                                 sys.executable, str(script)], env=env, cwd=elastic_job.ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while len(_pids(tmp_path)) < 3 and time.monotonic() < deadline:
        time.sleep(0.1)
    pids = _pids(tmp_path)
    assert len(pids) == 3  # two workers, one server
    launcher.kill()
    launcher.wait()
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = [p for p in pids if _alive(p)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left


def _pids(folder):
    return [int(f.name) for f in folder.iterdir() if f.name.isdigit()]


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie (not reaped yet: its parent died) is gone
        return f.read().split(")")[-1].split()[0] != "Z"


def test_elastic_takes_max_restarts_only_with_servers():
    proc = subprocess.run([sys.executable, "-m", "tfx_dist.run", "--elastic", "-n", "2", "--max-restarts",
                           "1", "true"], capture_output=True, text=True, cwd=elastic_job.ROOT,
                          env=dict(os.environ, PYTHONPATH=elastic_job.ROOT), timeout=60)
    assert proc.returncode == 2 and "--max-restarts with --ps only" in proc.stderr


def test_hybrid_strategy_refuses_an_elastic_job_naming_the_restart_path(monkeypatch):
    import tfx_dist
    from tfx_dist import errors

    monkeypatch.setenv("TFX_ELASTIC_DRIVER", "127.0.0.1:1")
    with pytest.raises(errors.UnimplementedError, match="--max-restarts K --checkpoint-dir DIR"):
        tfx_dist.HybridStrategy()


def test_a_server_rolls_back_to_any_commit_it_keeps(cpp_test_program):
    """The server's COMMIT and ROLLBACK requests in one process (custom_ops/embedding/server/tests/):
    any commit interval, a second worker's rollback, a commit waiting for the step before it, a
    dropped commit refused with nothing changed."""
    cpp_test_program("parameter_server_tests")()
