"""tfx_dist.horovod's collectives on 2 real processes, under each launcher, checked against numpy.

The worker is ``scripts/collectives.py``: it computes every collective and
what numpy says it must return, and these tests compare the pairs.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

import workers

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "collectives.py")
HOROVOD_VENV = os.path.join(workers.REPO_ROOT, "build", "horovod-venv")


def assert_checks(checks: dict) -> None:
    wrong = {name: pair for name, pair in checks.items()
             if not _same(pair[0], pair[1])}
    assert not wrong, json.dumps(wrong, indent=1)


def _same(got, expected) -> bool:
    try:
        return bool(np.allclose(np.asarray(got, dtype=np.float64),
                                np.asarray(expected, dtype=np.float64), rtol=1e-6))
    except (TypeError, ValueError):
        return got == expected


def test_collectives_under_tf_config(tmp_path):
    with open(SCRIPT) as f:
        results = workers.run_workers(f.read(), 2, str(tmp_path), timeout_s=240)
    for r in results:
        assert_checks(r.result)


def launch(command, cwd, timeout_s=300):
    """Runs a launcher command line on the worker script and checks what both ranks reported."""
    # The ranks write their checks to files: a launcher forwarding both ranks' output
    # into one stdout (mpirun) may cut one rank's long line with the other's.
    env = dict(os.environ, PYTHONPATH=workers.REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2", RESULT_DIR=str(cwd))
    env.pop("TF_CONFIG", None)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env,
                            cwd=str(cwd))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    for rank in (0, 1):
        path = os.path.join(str(cwd), f"result-{rank}.json")
        assert os.path.exists(path), f"rank {rank} reported nothing:\n" + result.stdout[-3000:]
        with open(path) as f:
            assert_checks(json.load(f))


def test_collectives_under_tfx_dist_run(tmp_path):
    launch([sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, SCRIPT], tmp_path)


class _KeyValueHandler(http.server.BaseHTTPRequestHandler):
    """horovodrun's rendezvous store protocol: PUT /scope/key, GET /scope/key (404 until put)."""

    def do_PUT(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        with self.server.lock:
            self.server.store[self.path] = body
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        with self.server.lock:
            body = self.server.store.get(self.path)
        self.send_response(404 if body is None else 200)
        self.end_headers()
        if body is not None:
            self.wfile.write(body)

    def log_message(self, *args):
        pass


STRATEGY_SCRIPT = """
import tensorflow as tf
import tfx_dist
from workers import report

strategy = tfx_dist.MultiWorkerMirroredStrategy()
value = strategy.reduce("SUM", strategy.run(lambda: tf.constant(1.0)), axis=None)
report({"replicas": strategy.num_replicas_in_sync, "sum": float(value)})
"""


def _horovodrun_environment(tmp_path, script):
    """Runs ``script`` on 2 processes with what `horovodrun --gloo -np 2 -H localhost:2` gives
    each (../shared/NOTES.md) and a store speaking its rendezvous server's protocol; no
    TF_CONFIG, no secret. Returns (results, the store's keys)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _KeyValueHandler)
    server.store, server.lock = {}, threading.Lock()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        per_rank = [{"TF_CONFIG": "", "TFX_JOB_SECRET": "", "HOROVOD_RANK": k,
                     "HOROVOD_SIZE": 2, "HOROVOD_LOCAL_RANK": k, "HOROVOD_LOCAL_SIZE": 2,
                     "HOROVOD_CROSS_RANK": 0, "HOROVOD_CROSS_SIZE": 1,
                     "HOROVOD_HOSTNAME": "localhost", "HOROVOD_CONTROLLER": "gloo",
                     "HOROVOD_GLOO_RENDEZVOUS_ADDR": "127.0.0.1",
                     "HOROVOD_GLOO_RENDEZVOUS_PORT": server.server_address[1]}
                    for k in range(2)]
        results = workers.run_workers(script, 2, str(tmp_path), timeout_s=240,
                                      per_rank_env=per_rank)
    finally:
        server.shutdown()
    return results, list(server.store)


def test_collectives_under_horovodrun_environment(tmp_path):
    with open(SCRIPT) as f:
        results, keys = _horovodrun_environment(tmp_path, f.read())
    for r in results:
        assert_checks(r.result)
    assert "/tfx_dist/secret" in keys


def test_strategy_under_horovodrun_environment(tmp_path):
    # tfx_dist's own strategies resolve the same job (tfx_dist.cluster.horovod_bootstrap).
    results, _ = _horovodrun_environment(tmp_path, STRATEGY_SCRIPT)
    assert [r.result for r in results] == [{"replicas": 2, "sum": 2.0}] * 2


@pytest.mark.skipif(not os.path.exists(os.path.join(HOROVOD_VENV, "bin", "horovodrun")),
                    reason="real horovodrun absent: build/horovod-venv is made by `make horovod` "
                           "(Horovod 0.28.1 with TensorFlow 2.12, 10 to 25 minutes)")
def test_collectives_under_real_horovodrun(tmp_path):
    launch([os.path.join(HOROVOD_VENV, "bin", "horovodrun"), "--gloo", "-np", "2", "-H",
            "localhost:2", shutil.which("python3") or sys.executable, SCRIPT], tmp_path)


@pytest.mark.skipif(workers.mpirun_missing() is not None, reason=str(workers.mpirun_missing()))
def test_collectives_under_mpirun(tmp_path):
    # No TF_CONFIG and no secret: the ranks exchange addresses over MPI (mpi4py).
    launch(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", "--mca", "btl",
            "self,tcp", "-x", "PYTHONPATH", "-x", "TF_CPP_MIN_LOG_LEVEL", "-x", "TFX_JOB_SECRET=",
            sys.executable, SCRIPT], tmp_path)
