"""keras-io's MovieLens collaborative filtering and wide/deep/cross networks, as users wrote them
(examples/recsys/), on real workers and parameter servers, served by a process without tfx_dist.

One job per strategy runs several variants in the same processes
(`scripts/recsys_examples.py`): the programs with Keras's `Embedding` under
`ParameterServerStrategy(variable_partitioner=MinSizePartitioner(...))` (the
movie table becomes a table on the servers) and under `HybridStrategy`, and
with `ShardedEmbedding` (the layer class swapped). Each loss falls, the workers
predict alike, and `examples/recsys/serve.py`, in a fresh process that never
imports tfx_dist, gives the trained model's predictions from the SavedModel
`tfx_dist.serving.export_for_serving` wrote. The long variant trains the
examples' default sizes.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from workers import REPO_ROOT, ps_cluster_envs, start_workers, wait_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "recsys_examples.py")
SERVE = os.path.join(REPO_ROOT, "examples", "recsys", "serve.py")


def _train(tmp_path, strategy, variants, num_ps=0, size="ci", timeout_s=420):
    with open(SCRIPT) as f:
        script = f.read()
    procs, _ = start_workers(script, 2 + num_ps, str(tmp_path),
                             extra_env={"STRATEGY": strategy, "VARIANTS": ",".join(variants),
                                        "SIZE": size, "REPO_ROOT": REPO_ROOT},
                             per_rank_env=ps_cluster_envs(2, num_ps) if num_ps else None)
    results = wait_workers(procs, timeout_s)
    for r in results:
        assert r.returncode == 0, r.describe()
    return [r.result for r in results[:2]]


def _serve(results: dict) -> dict:
    """The predictions of every export, from a process with plain TensorFlow only."""
    requests = {r["export"]: r["probe"] for r in results.values()}
    path = os.path.join(os.path.dirname(next(iter(requests))), "requests.json")
    with open(path, "w") as f:
        json.dump(requests, f)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # tfx_dist out of reach
    proc = subprocess.run([sys.executable, SERVE, path], capture_output=True, text=True, env=env,
                          cwd="/", timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _check(a, b):
    for variant, r in a.items():
        assert r["loss"][-1] < r["loss"][0], (variant, r["loss"])
        np.testing.assert_allclose(r["job_predictions"], b[variant]["job_predictions"], rtol=1e-5,
                                   atol=1e-6)
        # Every worker's model, BatchNormalization's moving statistics included (dcn), is the same.
        np.testing.assert_allclose(r["predictions"], b[variant]["predictions"], rtol=1e-5, atol=1e-6)
    served = _serve(a)
    for variant, r in a.items():
        np.testing.assert_allclose(np.reshape(served[r["export"]], np.shape(r["predictions"])),
                                   r["predictions"], rtol=1e-5, atol=1e-6, err_msg=variant)


def test_under_parameter_servers(tmp_path):
    a, b = _train(tmp_path, "ps", ["movielens:keras", "movielens:sharded", "dcn:keras", "dcn:sharded"],
                  num_ps=1)
    _check(a, b)
    # The partitioner put the large keras.layers.Embedding on the servers, the small ones not.
    assert a["movielens:keras"]["movie_table"] == "RemoteTable"
    assert a["movielens:sharded"]["movie_table"] == "RemoteTable"
    assert a["dcn:keras"]["tables"] == ["NoneType", "NoneType"]  # Keras variables
    assert a["dcn:sharded"]["tables"] == ["RemoteTable", "RemoteTable"]


# CI time: the same programs run under parameter servers in CI; hybrid under make reliability.
@pytest.mark.long
def test_under_hybrid(tmp_path):
    a, b = _train(tmp_path, "hybrid", ["movielens:keras", "dcn:keras"])
    _check(a, b)


@pytest.mark.long
@pytest.mark.parametrize("strategy,num_ps", [("ps", 1), ("hybrid", 0)])
def test_full_size(tmp_path, strategy, num_ps):
    variants = ["movielens:keras", "movielens:sharded", "dcn:keras", "dcn:sharded"]
    a, b = _train(tmp_path, strategy, variants, num_ps=num_ps, size="long", timeout_s=1800)
    _check(a, b)
