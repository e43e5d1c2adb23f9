"""tfx_dist under Ray Train on a real local Ray cluster (a head and worker nodes, `ray start`).

One cluster for the module; each job is a driver process (jobs.py) that runs a trainer on it.
"""

import glob
import json
import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np
import pytest

from ray_cluster import RayCluster, node_env, ray_missing

# A cluster of three nodes and five Ray jobs take minutes: over the CI budget, so `make ray` runs them.
pytestmark = [pytest.mark.skipif(ray_missing() is not None, reason=str(ray_missing())),
              pytest.mark.skipif(os.environ.get("TFX_RAY_TESTS") != "1",
                                 reason="the Ray tests run with `make ray` (TFX_RAY_TESTS=1)")]
JOBS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "jobs.py")
# A Python environment with another TensorFlow and the same Ray (`pip install "ray[default,train]==2.60.0"`
# into it), for a node whose workers really run another TensorFlow.
OTHER_TF_VENV = os.environ.get("TFX_RAY_OTHER_TF_VENV", "/work/venvs/tf2.20")


@pytest.fixture(scope="module")
def cluster():
    # 4 CPUs on two worker nodes: 2 workers + 2 parameter servers; the head runs no task.
    c = RayCluster(worker_cpus=(2, 2), dashboard=True)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def outputs(tmp_path_factory):
    return tmp_path_factory.mktemp("ray")


def run_job(case, cluster, out, timeout=300, env=None):
    os.makedirs(out, exist_ok=True)
    proc = subprocess.run([sys.executable, JOBS, case, cluster.address, str(out)], env=node_env(env),
                          capture_output=True, text=True, timeout=timeout)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (proc.stdout[-3000:], proc.stderr[-5000:])
    return json.loads(lines[-1][len("RESULT "):])


def test_too_few_cpus_is_an_error_naming_the_nodes(cluster):
    code = ("import ray, tfx_dist.ray; ray.init(address=%r, logging_level='ERROR')\n"
            "try:\n    tfx_dist.ray.check_resources(num_workers=8, cpus_per_worker=1, num_ps=2)\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n" % cluster.address)
    proc = subprocess.run([sys.executable, "-c", code], env=node_env(), capture_output=True, text=True,
                          timeout=120)
    assert "ResourceExhaustedError" in proc.stdout, proc.stderr[-3000:]
    assert "needs 8 worker(s) x 1 CPU + 2 parameter server(s) x 1 CPU = 10 CPU" in proc.stdout
    assert proc.stdout.count(": 2 CPU") == 2 and "ray start --address=" in proc.stdout


def test_two_workers_through_tensorflow_trainer_equal_tfx_dist_run_and_keep_an_intruder_out(cluster, outputs):
    # Before rank 1 joins, a process holding another run's secret connects to rank 0's rendezvous
    # as rank 1: its handshake fails naming the secret, and the job goes on undisturbed (its
    # weights below equal tfx-dist-run's).
    ray_out = outputs / "mwms"
    result = run_job("mwms", cluster, ray_out, env={"RAY_JOB_INTRUDER": "1"})
    assert result["error"] is None
    intruder = json.loads((ray_out / "intruder.json").read_text())
    assert "UnauthenticatedError" in intruder["classes"], intruder
    assert "failed authentication" in intruder["message"] and "TFX_JOB_SECRET" in intruder["message"]
    plain_out = outputs / "plain"
    plain_out.mkdir()
    env = dict(node_env(), TFX_TIMEOUT_S="60")
    proc = subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, JOBS, "plain",
                           "-", str(plain_out)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ray_weights, plain_weights = np.load(ray_out / "weights-0.npy"), np.load(plain_out / "weights-0.npy")
    np.testing.assert_allclose(ray_weights, plain_weights, rtol=1e-5, atol=1e-7)

    # The secret: one per start of the group, the same on both workers, and nowhere in what Ray
    # logs or shows (its log files, the dashboard's job, actor, task and Train run listings).
    secrets_seen = {open(f).read() for f in glob.glob(str(ray_out / "secret-0-*"))}
    assert len(secrets_seen) == 1
    secret = secrets_seen.pop()
    assert len(secret) == 64
    for path in glob.glob(os.path.join(cluster.temp_dir, "session_*", "logs", "**", "*"), recursive=True):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                assert secret.encode() not in f.read(), path
    base = f"http://127.0.0.1:{cluster.dashboard_port}"
    for api in ("/api/jobs/", "/api/v0/actors?detail=1&limit=1000", "/api/v0/tasks?detail=1&limit=1000",
                "/api/v0/placement_groups?detail=1", "/api/train/v2/runs"):
        try:
            with urllib.request.urlopen(base + api, timeout=30) as response:
                body = response.read()
        except urllib.error.HTTPError as e:  # an API this Ray does not have
            body = e.read()
        assert secret.encode() not in body, api


def test_tfx_dist_horovod_in_tensorflow_trainer(cluster, outputs):
    out = outputs / "horovod"
    assert run_job("horovod", cluster, out)["error"] is None
    ranks = [json.load(open(out / f"horovod-{rank}.json")) for rank in range(2)]
    assert [r["size"] for r in ranks] == [2, 2] and [r["sum"] for r in ranks] == [3.0, 3.0]
    # Three steps of plain gradient descent on the mean of both ranks' gradients.
    w, xs = np.array([1.0, -1.0]), np.array([[1.0, 2.0], [3.0, 4.0]])
    for _ in range(3):
        w = w - 0.01 * np.mean([2 * (w * x - 1.0) * x for x in xs], axis=0)
    np.testing.assert_allclose(ranks[0]["w"], w, rtol=1e-5)
    np.testing.assert_allclose(ranks[1]["w"], w, rtol=1e-5)


def test_a_killed_worker_actor_resumes_at_the_step_through_failure_config(cluster, outputs):
    out = outputs / "restart"
    result = run_job("restart", cluster, out)
    assert result["error"] is None and result["fit"]["restart_count"] == "1"
    # Killed (SIGKILL of its process) after 13 steps, saved every 5: the restarted group starts at
    # the last step checkpoint Ray's controller had received (10, or 5 when it had not yet polled
    # the report of step 10 when the group died), not at 0.
    assert (out / "start-0").read_text() == "0" and (out / "start-1").read_text() in ("5", "10")
    # ... and ends where the uninterrupted job ends.
    np.testing.assert_allclose(np.load(out / "weights-1.npy"), np.load(outputs / "mwms" / "weights-0.npy"),
                               rtol=1e-5, atol=1e-7)
    # Result.checkpoint is the last step checkpoint (22 steps: 2 epochs of 11).
    assert result["checkpoint"]["files"] == ["LATEST.json", "ckpt-20"]
    assert result["checkpoint"]["latest"]["step"] == 20
    # A fresh secret for the restarted group: a straggler of the first cannot join the second.
    first = {open(f).read() for f in glob.glob(str(out / "secret-0-*"))}
    second = {open(f).read() for f in glob.glob(str(out / "secret-1-*"))}
    assert len(first) == 1 and len(second) == 1 and first != second


def test_sigterm_to_a_worker_saves_at_the_step_and_the_restart_resumes_there(cluster, outputs):
    # Rank 1's process gets SIGTERM after 13 steps (saves every 5). The actor's main thread notes it,
    # both workers stop at the step they agree on, the chief reports that step's checkpoint, and Ray
    # restarts the group from it: no step is repeated or lost.
    out = outputs / "sigterm"
    result = run_job("sigterm", cluster, out)
    assert result["error"] is None and result["fit"]["restart_count"] == "1"
    messages = [(out / f"preempted-{rank}").read_text() for rank in range(2)]
    assert "preempted (SIGTERM received the notice)" in messages[1], messages
    saved = {int(re.search(r"saved step (\d+) ", m).group(1)) for m in messages}
    assert len(saved) == 1, messages
    stop = saved.pop()
    # The preempted-N files are written by the notice's save only; the step the workers agree on may
    # fall on a periodic save's step (15) when the notice takes two steps to reach both of them.
    assert 13 <= stop < 20, stop
    assert (out / "start-0").read_text() == "0" and int((out / "start-1").read_text()) == stop
    np.testing.assert_allclose(np.load(out / "weights-1.npy"), np.load(outputs / "mwms" / "weights-0.npy"),
                               rtol=1e-5, atol=1e-7)
    assert result["checkpoint"]["latest"]["step"] == 20


def test_parameter_servers_as_actors_two_workers_two_servers(cluster, outputs):
    out = outputs / "ps"
    result = run_job("ps", cluster, out)
    assert result["error"] is None and result["fit"]["num_ps"] == 2
    assert result["fit"]["loss"][1] < result["fit"]["loss"][0]
    w0, w1 = np.load(out / "weights-ps-0.npy"), np.load(out / "weights-ps-1.npy")
    reference = np.load(out / "weights-reference.npy")
    np.testing.assert_array_equal(w0, w1)
    # The dense layer (kernel 4 + bias 1) as in one process with the tables local: the tables
    # on the servers were trained the same, or the gradients through them would differ.
    np.testing.assert_allclose(w0[-5:], reference[-5:], rtol=1e-5, atol=1e-7)


def test_hybrid_strategy_through_tfx_trainer_equals_one_process(cluster, outputs):
    # HybridStrategy with no server: the table sharded over the two workers (all-to-alls).
    out = outputs / "hybrid"
    result = run_job("hybrid", cluster, out)
    assert result["error"] is None
    assert result["fit"]["num_ps"] == 0 and result["fit"]["table_kind"] == "WorkerShardedTable"
    reference_loss = json.loads((out / "loss-reference.json").read_text())
    np.testing.assert_allclose(result["fit"]["loss"], reference_loss, rtol=1e-5)
    assert reference_loss[1] < reference_loss[0]
    reference = {name: np.load(out / f"{name}-reference.npy") for name in ("weights", "rows")}
    assert np.abs(reference["rows"]).max() > 0.01  # the table trained
    for rank in range(2):
        # The whole table's rows and the dense layer (kernel 4 + bias 1) as in one process.
        np.testing.assert_allclose(np.load(out / f"rows-hybrid-{rank}.npy"), reference["rows"],
                                   rtol=1e-5, atol=1e-7)
        dense = np.load(out / f"weights-hybrid-{rank}.npy")[-5:]
        np.testing.assert_allclose(dense, reference["weights"][-5:], rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("case", ["data", "data-direct"])
def test_ray_data_shards_every_example_once_per_epoch(cluster, outputs, case):
    # "data": through tfx_dist.ray.dataset_shard; "data-direct": the shard's to_tf() given to fit.
    out = outputs / case
    run_job(case, cluster, out)
    for epoch in range(2):
        seen = [json.load(open(out / f"seen-{rank}-{epoch}.json")) for rank in range(2)]
        assert len(seen[0]) == len(seen[1]) == 256
        assert sorted(int(i) for i in seen[0] + seen[1]) == list(range(512))


def test_a_node_that_dies_mid_run_is_named_with_its_rank_and_what_to_do(cluster, outputs):
    # The workers on two nodes (STRICT_SPREAD); rank 1 waits at step 13 and the test kills its whole
    # node (the raylet and every process under it), as a lost machine.
    out = outputs / "node-lost"
    out.mkdir()
    driver = subprocess.Popen([sys.executable, JOBS, "node-lost", cluster.address, str(out)], env=node_env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (out / "holding").exists():
            assert driver.poll() is None and time.monotonic() < deadline, driver.communicate()
            time.sleep(0.5)
        holding = json.loads((out / "holding").read_text())
        cluster.kill_node(holding["node_id"])
        stdout, stderr = driver.communicate(timeout=300)
    finally:
        driver.kill()
        cluster.add_node(2)  # the other tests' CPUs back
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, stderr[-5000:]
    head = json.loads(lines[-1][len("RESULT "):])["error_head"]
    assert (f"tfx_dist.ray: the worker group lost rank 1 on Ray node {holding['node_id']} "
            f"({holding['node_ip']}): the node died.") in head, head
    assert "bring the node back or add one (`ray start --address=...`)" in head
    assert "FailureConfig(max_failures=K)" in head


@pytest.mark.skipif(not os.path.exists(os.path.join(OTHER_TF_VENV, "bin", "ray")),
                    reason=f"no Ray in TFX_RAY_OTHER_TF_VENV={OTHER_TF_VENV}")
def test_a_node_with_another_tensorflow_fails_the_start_naming_both(outputs):
    # Its own cluster: one worker node of this Python, one started from another environment's
    # `ray` (its workers import that TensorFlow); one worker on each.
    other = RayCluster(worker_cpus=(1,))
    try:
        other.add_node(1, ray=os.path.join(OTHER_TF_VENV, "bin", "ray"))
        result = run_job("versions", other, outputs / "versions")
    finally:
        other.stop()
    other_tf = subprocess.run([os.path.join(OTHER_TF_VENV, "bin", "python"), "-c",
                               "from importlib import metadata as m; print(m.version('tensorflow-cpu'))"],
                              capture_output=True, text=True, timeout=60).stdout.strip()
    message = result["error_head"]
    assert "the workers run different versions of tensorflow" in message, message
    assert re.search(rf"tensorflow {re.escape(other_tf)}: rank \d on node \w+ \(", message), message
    assert "Install the same tensorflow on every node" in message
