"""tfx_dist.HybridStrategy on real processes: tables sharded over the workers, the rest mirrored.

The worker script (scripts/hybrid_keras.py) runs fit (validation, a callback),
evaluate, a custom loop and predict; every number must equal a single process
with no strategy (same global batches), and the workers must agree exactly.
The same script runs with 2 parameter servers in the job (the tables on them).
"""

import os

import numpy as np
import pytest

from workers import ps_cluster_envs, run_workers, start_workers, wait_workers

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def _script(name="hybrid_keras.py"):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def _run(tmp_path, num_workers, **env):
    results = run_workers(_script(), num_workers, str(tmp_path), timeout_s=240,
                          extra_env={"MODE": "hybrid", **env})
    for r in results:
        assert r.returncode == 0, r.describe()
    return [r.result for r in results]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    (result,) = run_workers(_script(), 1, str(tmp_path_factory.mktemp("ref")), timeout_s=240,
                            extra_env={"MODE": "reference"})
    assert result.returncode == 0, result.describe()
    return result.result


def _equals_reference(result, reference, table_kind="WorkerShardedTable", color_kind="LocalTable",
                      rtol=1e-4, atol=1e-6):
    assert result["table_kind"] == table_kind
    assert result["color_kind"] == color_kind
    assert result["epochs_seen"] == 2
    for key in ("loss", "val_loss", "evaluate", "custom_losses"):
        np.testing.assert_allclose(result[key], reference[key], rtol=rtol, err_msg=key)
    for key in ("rows", "user_rows", "colors"):
        np.testing.assert_allclose(result[key], reference[key], rtol=rtol, atol=atol, err_msg=key)
    for a, b in zip(result["dense"], reference["dense"]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)


def test_one_worker_equals_one_process_without_strategy(tmp_path, reference):
    (result,) = _run(tmp_path, 1)
    assert reference["loss"][1] < reference["loss"][0]
    assert np.abs(reference["rows"]).max() > 0.01  # the table trained
    _equals_reference(result, reference)
    np.testing.assert_allclose(result["predictions"], reference["predictions"], rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    ckpt = str(tmp_path_factory.mktemp("ckpt"))
    return ckpt, _run(tmp_path_factory.mktemp("two"), 2, CKPT=ckpt)


@pytest.mark.smoke
def test_two_workers_agree_and_equal_one_process(two_workers, reference):
    _, (a, b) = two_workers
    for r in (a, b):
        _equals_reference(r, reference)
    # Every worker holds the same dense weights and gives the same predictions.
    assert a["dense"] == b["dense"] and a["colors"] == b["colors"] and a["rows"] == b["rows"]
    assert a["user_rows"] == b["user_rows"]
    np.testing.assert_array_equal(a["predictions"], b["predictions"])
    # Each worker stores only its own rows (ids % 2): half the table at most.
    assert 0 < a["stored_rows"] and 0 < b["stored_rows"]
    # Collectives other than all-reduces per custom step: 2 sharded tables x
    # (ids, rows) forward, then the gradient ids and rows of both tables in
    # one all-to-all each, and 2 more of the step itself: 8 if nothing fused
    # in the runtime (10 with TFX_ALLTOALL_FUSION=0). The all-to-alls are free
    # of tf.function's chain of stateful ops, so the runtime fuses those ready
    # in the same negotiation cycle: the two tables' ids, their rows, and the
    # backward's ids with its rows, down to 5 per step (3 all-to-alls). Which
    # fuse depends on timing, but the coordinator decides for both workers.
    steps = a["custom_steps"]
    assert a["alltoall_exchanges"] == b["alltoall_exchanges"]
    assert 5 * steps <= a["alltoall_exchanges"] <= 8 * steps, (a["alltoall_exchanges"], steps)
    # What makes the fusion possible, deterministic: every all-to-all of the
    # step's graph (4 forward, 2 backward) is out of the chain.
    assert a["alltoall_ops"] == [6, 6]


@pytest.mark.smoke
def test_checkpoint_of_two_workers_restores_into_one(tmp_path, two_workers):
    ckpt, (saved, _) = two_workers
    # The replicated table's rows are written once beside the checkpoint too (any placement restores).
    assert sorted(f for f in os.listdir(ckpt) if ".shard-" in f) == [
        "ckpt-tfx_ps-color_table-0.shard-0-of-1",
        "ckpt-tfx_ps-item_table-0.shard-0-of-2", "ckpt-tfx_ps-item_table-0.shard-1-of-2",
        "ckpt-tfx_ps-user_table-1.shard-0-of-2", "ckpt-tfx_ps-user_table-1.shard-1-of-2"]
    (restored,) = run_workers(_script(), 1, str(tmp_path), timeout_s=240,
                              extra_env={"MODE": "restore", "CKPT": ckpt})
    assert restored.returncode == 0, restored.describe()
    np.testing.assert_array_equal(restored.result["rows"], saved["rows"])
    np.testing.assert_array_equal(restored.result["user_rows"], saved["user_rows"])


def test_two_workers_and_two_parameter_servers(tmp_path, reference):
    """With ps tasks every table (the small one too) lives on the servers: fit, evaluate, the
    custom loop and predict equal one process, the workers agree exactly, the loss falls, and
    the servers' checkpoint restores into HybridStrategy without servers (1 worker)."""
    ckpt = str(tmp_path / "ckpt")
    os.makedirs(ckpt)
    procs, _ = start_workers(_script(), 4, str(tmp_path / "job"),
                             extra_env={"MODE": "hybrid", "CKPT": ckpt},
                             per_rank_env=ps_cluster_envs(2, 2))
    results = wait_workers(procs, 240)
    for r in results:
        assert r.returncode == 0, r.describe()
    a, b = results[0].result, results[1].result
    assert a["loss"][1] < a["loss"][0]
    for r in (a, b):
        _equals_reference(r, reference, table_kind="RemoteTable", color_kind="RemoteTable")
        assert r["alltoall_exchanges"] == 0  # no all-to-all: the servers hold the rows
    assert a["dense"] == b["dense"] and a["rows"] == b["rows"] and a["user_rows"] == b["user_rows"]
    np.testing.assert_array_equal(a["predictions"], b["predictions"])
    (restored,) = run_workers(_script(), 1, str(tmp_path / "restore"), timeout_s=240,
                              extra_env={"MODE": "restore", "CKPT": ckpt,
                                         "COLOR_PLACEMENT": "sharded"})
    assert restored.returncode == 0, restored.describe()
    np.testing.assert_allclose(restored.result["rows"], a["rows"], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(restored.result["user_rows"], a["user_rows"], rtol=1e-6, atol=1e-7)


def test_adamax_with_weight_decay_on_two_workers_equals_one_worker(tmp_path):
    """Adamax with weight decay (the store's kernel): each owner applies it to its rows of every
    worker's gradients. 2 workers equal 1 worker
    of the same global batches (both lazy: a one-process Keras variable decays every row)."""
    env = {"OPTIMIZER": "Adamax", "LR": "0.05", "OPTIMIZER_ARGS": '{"weight_decay": 0.1}'}
    (one,) = _run(tmp_path / "one", 1, **env)
    a, b = _run(tmp_path / "two", 2, **env)
    assert a["rows"] == b["rows"] and a["user_rows"] == b["user_rows"]
    assert one["loss"][1] < one["loss"][0] and np.abs(one["rows"]).max() > 0.01
    for key in ("loss", "val_loss", "custom_losses"):
        np.testing.assert_allclose(a[key], one[key], rtol=1e-4, err_msg=key)
    for key in ("rows", "user_rows"):
        np.testing.assert_allclose(a[key], one[key], rtol=1e-4, atol=1e-6, err_msg=key)
