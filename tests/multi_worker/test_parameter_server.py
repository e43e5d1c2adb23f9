"""tfx_dist.ParameterServerStrategy on real processes: parameter servers and workers."""

import json
import os

import numpy as np
import pytest

from workers import free_ports, run_workers, start_workers, wait_workers

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def _script(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def _cluster_envs(num_workers, num_ps):
    """TF_CONFIG of every task: the workers first, then the parameter servers."""
    ports = free_ports(num_workers + num_ps)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:num_workers]],
               "ps": [f"127.0.0.1:{p}" for p in ports[num_workers:]]}
    tasks = [("worker", i) for i in range(num_workers)] + [("ps", i) for i in range(num_ps)]
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": t, "index": i}})}
            for t, i in tasks]


def run_ps_job(tmp_path, script, num_workers=2, num_ps=2, env=None, timeout_s=180):
    """Runs every task; returns (worker results, ps results)."""
    procs, _ = start_workers(_script(script), num_workers + num_ps, str(tmp_path), extra_env=env,
                             per_rank_env=_cluster_envs(num_workers, num_ps))
    results = wait_workers(procs, timeout_s)
    return results[:num_workers], results[num_workers:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    (result,) = run_workers(_script("ps_keras.py"), 1, str(tmp_path_factory.mktemp("ref")),
                            extra_env={"MODE": "reference"})
    return result.result


def test_fit_on_two_servers_equals_one_process(tmp_path, reference):
    """2 workers + 2 parameter servers, synchronous Adagrad: every number equals one process's."""
    workers, servers = run_ps_job(tmp_path, "ps_keras.py")
    for r in workers + servers:
        assert r.returncode == 0, r.describe()
    results = [w.result for w in workers]
    assert results[0]["loss"][-1] < results[0]["loss"][0]
    for r in results:
        np.testing.assert_allclose(r["rows"], reference["rows"], rtol=1e-4, atol=1e-6)
        for a, b in zip(r["dense"], reference["dense"]):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(r["loss"], reference["loss"], rtol=1e-4)
    np.testing.assert_array_equal(results[0]["predictions"], results[1]["predictions"])
