"""Checkpoints of parameter-server tables on real processes: save with 2 servers, restore into 1 or 3.

The save job (2 workers + 2 servers) trains, saves with tf.train.CheckpointManager,
then trains one more epoch; a restore job with another number of servers must
read the same rows and, training the same epoch, reach the same rows and dense
weights (the servers' optimizer slots were restored too).
"""

import os

import numpy as np
import pytest

from test_parameter_server import run_ps_job


def _ok(results):
    for r in results:
        assert r.returncode == 0, r.describe()


def _save(tmp_path, **env):
    ckpt = str(tmp_path / "ckpt")
    workers, servers = run_ps_job(tmp_path / "save", "ps_checkpoint.py",
                                  env={"PHASE": "save", "CKPT": ckpt, **env})
    _ok(workers + servers)
    return ckpt, workers[0].result


def _restore(tmp_path, ckpt, num_ps, **env):
    workers, servers = run_ps_job(tmp_path / f"restore{num_ps}", "ps_checkpoint.py", num_ps=num_ps,
                                  env={"PHASE": "restore", "CKPT": ckpt, **env})
    _ok(workers + servers)
    return [w.result for w in workers]


def _same_training(saved, restored):
    np.testing.assert_allclose(restored["rows_saved"], saved["rows_saved"], rtol=0, atol=0)
    for a, b in zip(restored["dense_saved"], saved["dense_saved"]):
        np.testing.assert_allclose(a, b, rtol=0, atol=0)
    np.testing.assert_allclose(restored["rows_continued"], saved["rows_continued"], rtol=1e-5, atol=1e-7)
    for a, b in zip(restored["dense_continued"], saved["dense_continued"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    return _save(tmp_path_factory.mktemp("ps_ckpt"))


def test_each_server_writes_its_shard_beside_the_checkpoint(saved):
    ckpt, result = saved
    files = result["files"]
    shards = [f for f in files if ".shard-" in f]
    assert sorted(s.rsplit(".shard-", 1)[1] for s in shards) == ["0-of-2", "1-of-2"], files
    assert not any(f.startswith("workertemp") for f in files), files  # the other worker cleaned up
    # Only the chief's save made the servers write: nothing in the temporary folders' names.
    assert all(s.startswith(os.path.basename(result["saved"])) for s in shards), (shards, result["saved"])


def test_checkpoint_manager_deletes_the_shard_files_of_old_checkpoints(saved):
    ckpt, result = saved
    first = os.path.basename(result["first_saved"])
    assert first != os.path.basename(result["saved"])
    # max_to_keep=1 deleted the first checkpoint: TensorFlow's files and the servers' shards.
    assert not [f for f in result["files"] if f.startswith(first + ".") or f.startswith(first + "-")], \
        result["files"]


def test_keras_save_weights_then_load_weights_into_three_servers(tmp_path, saved):
    """save_weights / model.save: the table's rows and slots go into the chief's file (the one
    format of every placement), through shard files the servers write and the chief removes. A
    job of 3 servers loads a copy of the chief's .weights.h5 with load_weights: the same rows and
    dense weights, and training on reaches the same rows (the servers' optimizer slots and
    Keras's were restored)."""
    ckpt, result = saved
    files = result["keras_files"]
    for name in ("w0.weights.h5", "m0.keras"):
        assert name in files, files
    assert not [f for f in files if ".shard-" in f or f.startswith(".tfx_table")], files
    for w in _restore(tmp_path, ckpt, num_ps=3, KERAS="1"):
        _same_training(result, w)


def test_restore_into_one_server_and_bad_files(tmp_path, saved):
    ckpt, result = saved
    workers = _restore(tmp_path, ckpt, num_ps=1, BAD_FILES="1")
    for w in workers:
        missing = w["missing_error"]
        assert missing and "FileNotFoundError" in missing and w["missing_shard"] in missing, missing
        corrupt = w["corrupt_error"]
        assert corrupt and w["corrupt_shard"] in corrupt and "checksum" in corrupt, corrupt
        # Neither bad restore changed the table.
        assert w["rows_after_missing"] == w["rows_before"]
        assert w["rows_after_corrupt"] == w["rows_before"]
        _same_training(result, w)


def test_restore_into_three_servers(tmp_path, saved):
    ckpt, result = saved
    for w in _restore(tmp_path, ckpt, num_ps=3):
        _same_training(result, w)


def test_dynamic_table_trained_by_adam_restores_into_one_server(tmp_path):
    """Adam: its slots and the servers' step count (bias correction) must be restored too."""
    env = {"DYNAMIC": "1", "OPTIMIZER": "Adam"}
    ckpt, result = _save(tmp_path, **env)
    for w in _restore(tmp_path, ckpt, num_ps=1, **env):
        _same_training(result, w)


# CI time: resharding by servers is test_restore_into_three_servers; Nadam's state through a reshard
# is checked in one process (tests/embedding/test_optimizers_match_keras.py).
@pytest.mark.long
def test_nadam_restores_into_three_servers(tmp_path):
    """Nadam: its slots and the servers' step count (its bias correction and momentum-schedule
    product are functions of it) restore into another number of servers. Refused on servers
    before (no kernel)."""
    env = {"OPTIMIZER": "Nadam"}
    ckpt, result = _save(tmp_path, **env)
    for w in _restore(tmp_path, ckpt, num_ps=3, **env):
        _same_training(result, w)


def test_keras_callbacks_resume_and_load_model_in_a_new_job(tmp_path, saved):
    """BackupAndRestore and ModelCheckpoint with a server table: the save job's first epoch ran
    as a fit stopped by an error after it. A new job loads ModelCheckpoint's .keras with
    load_model (the same rows and dense weights), trains one epoch away from the backup, then
    fit with BackupAndRestore restores the backup (rows and the servers' slots) and trains the
    last epoch only, to the rows the save job reached training on uninterrupted."""
    ckpt, result = saved
    assert result["interrupted"] == "interrupted after epoch 1", result["interrupted"]
    for files in (result["backup_files"], result["mc_files"]):
        assert files and not [f for f in files if ".shard-" in f], files  # the rows are in the file
    workers, servers = run_ps_job(tmp_path / "resume", "ps_checkpoint.py",
                                  env={"PHASE": "resume", "CKPT": ckpt})
    _ok(workers + servers)
    for w in (w.result for w in workers):
        assert w["rows_moved"] != w["rows_saved"]
        np.testing.assert_allclose(w["rows_at_resume"], result["rows_saved"], rtol=0, atol=0)
        assert len(w["resumed_losses"]) == 1, w["resumed_losses"]  # epoch 1 was restored
        _same_training(result, w)


def test_workers_loading_differently_fail_at_once_on_every_worker(tmp_path, saved):
    """One worker loads the ModelCheckpoint file with load_model (which also builds the optimizer),
    the other builds the model and calls load_weights: they create variables in different orders,
    which used to pair the initial-value broadcasts wrongly and hang. Now every worker fails
    at once (well within TFX_TIMEOUT_S) naming what each was creating and what to do; the
    servers exit cleanly."""
    ckpt, _ = saved
    workers, servers = run_ps_job(tmp_path, "ps_checkpoint.py", timeout_s=150, kill_on_failure=False,
                                  env={"PHASE": "resume", "CKPT": ckpt, "MIXED": "1",
                                       "TFX_TIMEOUT_S": "60"})
    messages = []
    for w in workers:
        assert w.returncode == 1, w.describe()
        assert "VariableOrderError" in w.stderr and "load_model" in w.stderr, w.describe()
        messages.append(w.stderr[w.stderr.index("VariableOrderError: "):].splitlines()[0])
    assert messages[0] == messages[1], messages  # the same error on both workers
    assert "worker 0: variable #" in messages[0] and "worker 1: variable #" in messages[0], messages
    _ok(servers)


def test_dense_variables_on_servers_round_trip(tmp_path):
    """dense_variables="servers" with Adam: a tf.train.Checkpoint restored into 1 server before
    training, and a Keras .weights.h5 loaded into 3 after a first epoch of training, put the saved
    dense weights and the servers' Adam slots and step count back: training on reaches the save
    job's rows and weights (rtol 1e-5; restarted slots would move Adam's first step by ~lr)."""
    env = {"DENSE": "servers", "OPTIMIZER": "Adam"}
    ckpt, result = _save(tmp_path, **env)
    files = os.listdir(ckpt)
    for variable in ("dense_kernel", "dense_bias"):  # the servers wrote the dense slots' shards
        shards = sorted(f.rsplit(".shard-", 1)[1] for f in files if f"-tfx_ps-dense_{variable}-" in f)
        assert shards == ["0-of-2", "1-of-2"], files
    for num_ps, extra in ((1, {}), (3, {"KERAS": "1", "TRAIN_FIRST": "1"})):
        for w in _restore(tmp_path, ckpt, num_ps=num_ps, **env, **extra):
            _same_training(result, w)
            # Dense values reached the servers over the connections: no temporary file on the
            # way (a Keras file's table rows reach them through shard files, `.tfx_table-*`).
            dense_temp = [f for f in w["temp_files"] if not os.path.basename(f).startswith(".tfx_table-")]
            assert dense_temp == [], w["temp_files"]
            # The chief's ASSIGN of the 40-row table in 100-byte chunks (several per server).
            np.testing.assert_allclose(w["assigned_rows"],
                                       np.arange(160, dtype=np.float32).reshape(40, 4) / 7, rtol=1e-6)
