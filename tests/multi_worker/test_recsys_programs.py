"""Recommender programs as users write them, on real workers and parameter servers.

One job per strategy runs `scripts/recsys_programs.py`, which checks several
things in the same processes (TensorFlow's start is most of a job's cost).
"""

import os

import numpy as np

from workers import ps_cluster_envs, start_workers, wait_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "recsys_programs.py")


def _run(tmp_path, strategy, num_ps=0, timeout_s=240):
    with open(SCRIPT) as f:
        script = f.read()
    procs, _ = start_workers(script, 2 + num_ps, str(tmp_path),
                             extra_env={"STRATEGY": strategy, "TFX_TIMEOUT_S": 600},
                             per_rank_env=ps_cluster_envs(2, num_ps) if num_ps else None)
    results = wait_workers(procs, timeout_s)
    for r in results:
        assert r.returncode == 0, r.describe()
    return [r.result for r in results[:2]]


def _check_every_example_once_per_epoch(a, b):
    for shuffle in (True, "batch", False):
        epochs_a, epochs_b = a[f"seen_shuffle_{shuffle}"], b[f"seen_shuffle_{shuffle}"]
        assert len(epochs_a) == len(epochs_b) >= 1
        for seen_a, seen_b in zip(epochs_a, epochs_b):
            assert sorted(seen_a + seen_b) == list(range(64)), (shuffle, seen_a, seen_b)
    first, second = a["seen_shuffle_True"]
    assert first != second  # shuffled anew each epoch, as Keras does on one device


def test_hybrid_numpy_input_and_workers_whose_inputs_differ(tmp_path):
    """NumPy input once per epoch; predict on per-worker data of different lengths, and a step
    that fails on worker 1 only (the program catches it): errors within seconds on every
    worker, naming the workers (the timeout is 600 s)."""
    a, b = _run(tmp_path, "hybrid")
    _check_every_example_once_per_epoch(a, b)
    for r in (a, b):
        assert r["uneven_predict"].startswith("UnevenInputError"), r["uneven_predict"]
        assert "worker 0: 4, worker 1: 2" in r["uneven_predict"]
        assert r["failed_step"] is not None and r["after_failed_step"] is not None
        assert r["uneven_seconds"] < 60, r["uneven_seconds"]
    assert "a bad record in worker 1's batch" in b["failed_step"]
    assert "rank 1" in a["failed_step"] + a["after_failed_step"], a


def test_multi_worker_numpy_input_and_saves(tmp_path):
    """NumPy input once per epoch; saves as the README says: write_filepath creates its folder,
    one path on every worker works, a save failed on one worker or different saves at the same
    point are errors on every worker (and the next save still pairs), and a save on the chief
    alone at the end completes with every process exiting 0."""
    a, b = _run(tmp_path, "mwms")
    _check_every_example_once_per_epoch(a, b)
    for r in (a, b):
        assert r["same_path_files"] == ["b.keras", "b.weights.h5"]
        assert r["same_path_loads"]
        assert r["failed_save"].startswith("SaveFailedError") and "worker(s) [1]" in r["failed_save"]
        assert r["next_save"] is None
        assert r["mismatched_save"].startswith("SaveMismatchError"), r["mismatched_save"]
    assert "not a directory" in b["failed_save"]  # the failing worker names its own error
    assert os.path.exists(tmp_path / "chief_only.keras")
    assert os.path.exists(tmp_path / "new" / "deep" / "a.weights.h5")


def test_parameter_servers_take_what_keras_users_feed(tmp_path):
    """String features (StringLookup, Hashing), ragged multi-hot ids, a global batch of 33 over
    2 workers (equal to one process), a subclassed model whose server table takes Keras's
    Embedding arguments; NumPy input once per epoch; TensorFlow's variable_partitioner makes a
    plain Embedding it splits a server table (equal to ShardedEmbedding and to one process,
    saved and served as one), a small one stays a Keras variable, and no warning."""
    a, b = _run(tmp_path, "ps", num_ps=1)
    _check_every_example_once_per_epoch(a, b)
    for r in (a, b):
        assert r["features_loss"][-1] < r["features_loss"][0]
        np.testing.assert_allclose(r["features_loss"], r["features_reference_loss"], rtol=1e-4)
        assert r["subclassed_loss"][-1] < r["subclassed_loss"][0]
    np.testing.assert_array_equal(a["features_weights"][0], b["features_weights"][0])
    # he_normal on the servers: N(0, 2 / 40) truncated, moved a little by training.
    assert 0.1 < a["he_normal_std"] < 0.4, a["he_normal_std"]
    _check_partitioned_embedding(a)


def _check_partitioned_embedding(r):
    assert r["plain_embedding_warnings"] == []  # the partitioner decided: nothing to warn about
    is_embedding, is_sharded, placement, small_class, small_weights = r["partitioned_kinds"]
    assert is_embedding and is_sharded and placement == "on_servers", r["partitioned_kinds"]
    assert small_class == "Embedding" and small_weights == ["colors/embeddings"], small_weights
    assert r["partitioned_loss"][-1] < 0.7 * r["partitioned_loss"][0], r["partitioned_loss"]
    np.testing.assert_allclose(r["partitioned_loss"], r["sharded_loss"], rtol=1e-5)
    np.testing.assert_allclose(r["partitioned_loss"], r["one_process_loss"], rtol=1e-3, atol=2e-5)
    np.testing.assert_allclose(r["partitioned_predictions"], r["sharded_predictions"], rtol=1e-5, atol=1e-6)
    assert r["loaded_kind"] == "ShardedEmbedding"
    for key in ("loaded_predictions", "served_predictions"):
        np.testing.assert_allclose(r[key], r["partitioned_predictions"], rtol=1e-5, atol=1e-6)
