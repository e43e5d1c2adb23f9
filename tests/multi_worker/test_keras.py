"""Keras 3 fit / evaluate / predict on real worker processes."""

import os

import numpy as np
import pytest

from workers import run_workers

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def _script(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def _run(tmp_path, name, num_workers, env, timeout_s=150, per_rank_env=None):
    return [r.result for r in run_workers(_script(name), num_workers, str(tmp_path / name),
                                          timeout_s=timeout_s, extra_env=env,
                                          per_rank_env=per_rank_env)]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process, no strategy, the same global batch and initial weights."""
    (result,) = _run(tmp_path_factory.mktemp("ref"), "keras_train.py", 1, {"MODE": "reference"})
    return result


def _assert_same_weights(results):
    for r in results[1:]:
        for a, b in zip(results[0]["weights"], r["weights"]):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _assert_matches_reference(result, reference, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(result["initial_weights"][0], reference["initial_weights"][0])
    for key in ("loss", "mae", "val_loss", "val_mae"):
        np.testing.assert_allclose(result["history"][key], reference["history"][key],
                                   rtol=rtol, atol=atol, err_msg=key)
    np.testing.assert_allclose(result["evaluate"], reference["evaluate"], rtol=rtol, atol=atol)
    for a, b in zip(result["weights"], reference["weights"]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    np.testing.assert_allclose(result["predictions"], reference["predictions"],
                               rtol=rtol, atol=atol)


@pytest.mark.parametrize("input_kind", ["numpy", pytest.param("dataset", marks=pytest.mark.smoke),
                                        "from_function"])
def test_two_workers_fit_evaluate_predict_match_one_process(tmp_path, reference, input_kind):
    # Different seeds per worker: the chief's initial values must win.
    results = _run(tmp_path, "keras_train.py", 2, {"MODE": "multi", "INPUT": input_kind},
                   per_rank_env=[{"SEED_OFFSET": 0}, {"SEED_OFFSET": 7}])
    assert [r["num_replicas"] for r in results] == [2, 2]
    _assert_same_weights(results)
    for r in results:
        _assert_matches_reference(r, reference)
    assert len(results[0]["predictions"]) == 97
    if input_kind == "from_function":
        assert [r["contexts"] for r in results] == [[[0, 2, 2]], [[1, 2, 2]]]


def test_steps_per_execution_matches_one_process(tmp_path, reference):
    # Several steps per tf.function call: the input checks run through get_next_as_optional.
    results = _run(tmp_path, "keras_train.py", 2,
                   {"MODE": "multi", "INPUT": "numpy", "STEPS_PER_EXECUTION": "4"})
    _assert_same_weights(results)
    for r in results:
        _assert_matches_reference(r, reference)


def test_three_workers_two_devices_each(tmp_path, reference):
    results = _run(tmp_path, "keras_train.py", 3,
                   {"MODE": "multi", "INPUT": "dataset", "LOCAL_DEVICES": 2}, timeout_s=240)
    assert [r["num_replicas"] for r in results] == [6, 6, 6]
    _assert_same_weights(results)
    for r in results:
        _assert_matches_reference(r, reference)


def test_uneven_batches_match_one_process(tmp_path):
    # A global batch of 10 over 2 workers of 2 replicas each: 3/2 rows per
    # worker's replicas, and partial last batches (288 and 96 examples).
    env = {"INPUT": "numpy", "GLOBAL_BATCH": "10"}
    (reference,) = _run(tmp_path / "ref", "keras_train.py", 1, {**env, "MODE": "reference"})
    results = _run(tmp_path / "multi", "keras_train.py", 2,
                   {**env, "MODE": "multi", "LOCAL_DEVICES": 2}, timeout_s=240)
    assert [r["num_replicas"] for r in results] == [4, 4]
    _assert_same_weights(results)
    for r in results:
        _assert_matches_reference(r, reference, rtol=1e-5, atol=1e-6)
