"""The parameter-server lookup op (TfxPsTableLookup): rows, graph, gradient, bad input.

One job of 1 worker + 2 parameter servers (real processes, loopback).
"""

import os

import numpy as np
import pytest

from workers import ps_cluster_envs, start_workers, wait_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "ps_lookup_op.py")


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    with open(SCRIPT) as f:
        script = f.read()
    procs, _ = start_workers(script, 3, str(tmp_path_factory.mktemp("lookup_op")),
                             per_rank_env=ps_cluster_envs(1, 2))
    results = wait_workers(procs, 180)
    for r in results:
        assert r.returncode == 0, r.describe()
    return results[0].result


def test_rows_equal_the_c_api_in_a_function_and_eagerly(job):
    rows = np.asarray(job["c_api"])
    assert rows.shape == (5, 4) and np.abs(rows).max() > 0  # uniform initial values, not zeros
    np.testing.assert_array_equal(np.asarray(job["function"]), rows)
    np.testing.assert_array_equal(np.asarray(job["eager"]), rows)


def test_the_traced_lookup_is_one_op(job):
    """No tf.custom_gradient (IdentityN), anchor read or identities around the op."""
    ops = [t for t in job["ops"] if t not in ("Placeholder", "NoOp")]
    # The Identity is tf.function's own, of its return value (every function has one).
    assert ops == ["Identity", "TfxPsTableLookup"], job["ops"]


@pytest.mark.parametrize("mode", ["grad_eager", "grad_function"])
def test_anchor_gradient_is_the_rows_gradient_over_the_ids(job, mode):
    values, indices, dense_shape = job[mode]
    np.testing.assert_array_equal(np.asarray(values), np.asarray(job["weights"]))
    assert indices == [3, 17, 0, 38, 21]
    assert dense_shape == [1 << 62, 4]


def test_two_dimensional_ids_are_refused_naming_the_op(job):
    assert job["bad_ids"] and "TfxPsTableLookup wants 1-D ids" in job["bad_ids"], job["bad_ids"]
