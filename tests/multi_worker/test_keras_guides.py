"""The keras.io / tensorflow.org training programs under the multi-process strategies, each
against one device (rtol 1e-5): 2 worker processes, and 1 parameter server where there is one.

`keras_guide_loops` holds the programs; `tests/local/test_keras_guides.py` runs them under the
in-process strategies.
"""

import os

import pytest

from keras_guide_loops import SHAPES, assert_same
from workers import ps_cluster_envs, start_workers, wait_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "keras_guides.py")


@pytest.mark.parametrize("strategy,num_ps", [("multi_worker_mirrored", 0), ("parameter_server", 1),
                                             ("hybrid", 0)])
def test_guide_programs_match_one_device(tmp_path, strategy, num_ps):
    with open(SCRIPT) as f:
        script = f.read()
    envs = ps_cluster_envs(2, num_ps) if num_ps else None
    procs, _ = start_workers(script, 2 + num_ps, str(tmp_path), extra_env={"STRATEGY": strategy},
                             per_rank_env=envs)
    results = wait_workers(procs, timeout_s=300)
    for r in results:
        assert r.returncode == 0, r.describe()
    workers = [r.result for r in results[:2]]
    one_device = {**workers[0]["one_device"], **workers[1]["one_device"]}
    failures = []
    for shape in SHAPES:
        for i, worker in enumerate(workers):
            try:
                assert_same(worker["shapes"][shape], one_device[shape], shape=shape)
            except AssertionError as e:
                failures.append(f"worker {i}, {shape}: {str(e)[-1500:]}")
    assert not failures, "\n".join(failures)
