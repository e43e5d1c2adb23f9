"""Keras one-file saves of HybridStrategy's worker-sharded tables, on real processes.

Three jobs share one folder (scripts/hybrid_keras_files.py): 2 workers train
with ModelCheckpoint and BackupAndRestore, save with save_weights, model.save
and tf.train.Checkpoint, then a second fit is preempted after its first
epoch; 1 worker loads those files (2 -> 1), restores the checkpoint inside a
tf.function, trains an epoch and saves; 2 workers load that (1 -> 2) and resume
the preempted fit, which must end at the uninterrupted run's weights.
"""

import os

import h5py
import numpy as np
import pytest

from workers import run_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts",
                      "hybrid_keras_files.py")


def _job(tmp_path, folder, num_workers, mode):
    with open(SCRIPT) as f:
        script = f.read()
    results = run_workers(script, num_workers, str(tmp_path / mode), timeout_s=240,
                          extra_env={"MODE": mode, "DIR": str(folder)})
    return [r.result for r in results]


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hybrid_keras_files")
    folder = tmp / "shared"
    folder.mkdir()
    first = _job(tmp, folder, 2, "first")
    listing = sorted(os.listdir(folder))
    one = _job(tmp, folder, 1, "one")
    resume = _job(tmp, folder, 2, "resume")
    return {"folder": folder, "first": first, "listing": listing, "one": one[0],
            "resume": resume}


def _assert_state_equal(a, b):
    assert a["kinds"] == b["kinds"]
    for key in ("items", "users", "colors"):
        np.testing.assert_array_equal(a["lookups"][key], b["lookups"][key], err_msg=key)
    for x, y in zip(a["dense"], b["dense"]):
        np.testing.assert_array_equal(x, y)


def test_saves_write_one_complete_file_with_the_whole_tables(jobs):
    chief, other = jobs["first"]
    assert chief["final"]["kinds"] == ["WorkerShardedTable", "WorkerShardedTable", "LocalTable"]
    assert chief["loss"][1] < chief["loss"][0]
    assert np.abs(chief["final"]["lookups"]["items"]).max() > 0.01  # the table trained
    _assert_state_equal(chief["final"], other["final"])
    # The chief's file holds every row with its Adagrad slot; the other worker's none.
    assert chief["weights_file"] == [40, 2, 4]
    assert "rows are in the chief's file only" in other["weights_file"]
    # Only the chief's files at the real paths; no shard files beside the Keras files
    # (the other worker's temporary files are gone).
    assert jobs["listing"] == ["backup", "m.keras", "mc.keras", "table_ckpt", "w.weights.h5"]
    with h5py.File(jobs["folder"] / "w.weights.h5", "r") as f:
        rows = np.asarray(f["layers/sharded_embedding/vars/tfx_table_records"][:, 0])
    # Row id at index id (global-id order): the lookups of ids 0..39.
    # (a lookup's mean of 3 copies of a row rounds in the last bit)
    np.testing.assert_allclose(rows, chief["final"]["lookups"]["items"], rtol=1e-6, atol=1e-8)
    assert chief["preempted"] == "epoch 0" and other["preempted"] == "epoch 0"


def test_files_of_two_workers_load_into_one(jobs):
    saved, one = jobs["first"][0]["final"], jobs["one"]
    _assert_state_equal(one["load_weights"], saved)
    _assert_state_equal(one["load_model"], saved)
    _assert_state_equal(one["model_checkpoint"], saved)  # ModelCheckpoint's last epoch


def test_restore_inside_tf_function_runs_before_the_lookups(jobs):
    assert jobs["one"]["graph_restores"] == [True]  # restored by a py_function in the graph
    assert jobs["one"]["lookup_waits_for_restore"] == [True]
    # The restored rows, not the initial zeros (the graph's mean rounds in the last bit).
    np.testing.assert_allclose(jobs["one"]["restore_in_function"],
                               jobs["first"][0]["final"]["lookups"]["items"], rtol=1e-6, atol=1e-8)


def test_file_of_one_worker_loads_into_two(jobs):
    trained = jobs["one"]["trained"]
    assert trained["lookups"]["items"] != jobs["first"][0]["final"]["lookups"]["items"]
    for r in jobs["resume"]:
        _assert_state_equal(r["load_weights"], trained)


def test_preempted_fit_resumes_to_the_uninterrupted_weights(jobs):
    uninterrupted = jobs["first"][0]["final"]
    for r in jobs["resume"]:
        assert r["resumed_epochs"] == 1  # the backup's epoch was not trained again
        for key in ("items", "users", "colors"):
            np.testing.assert_allclose(r["final"]["lookups"][key], uninterrupted["lookups"][key],
                                       rtol=1e-5, atol=1e-7, err_msg=key)
        for x, y in zip(r["final"]["dense"], uninterrupted["dense"]):
            np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)
    assert not os.path.exists(jobs["folder"] / "backup")  # removed at the end of the fit
