"""tfx_dist.ParameterServerStrategy on real processes: parameter servers and workers."""

import os

import numpy as np
import pytest

from workers import ps_cluster_envs, run_workers, start_workers, wait_workers

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")


def _script(name):
    with open(os.path.join(SCRIPTS, name)) as f:
        return f.read()


def run_ps_job(tmp_path, script, num_workers=2, num_ps=2, env=None, timeout_s=180,
               kill_on_failure=True):
    """Runs every task; returns (worker results, ps results)."""
    procs, _ = start_workers(_script(script), num_workers + num_ps, str(tmp_path), extra_env=env,
                             per_rank_env=ps_cluster_envs(num_workers, num_ps))
    results = wait_workers(procs, timeout_s, kill_on_failure=kill_on_failure)
    return results[:num_workers], results[num_workers:]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    (result,) = run_workers(_script("ps_keras.py"), 1, str(tmp_path_factory.mktemp("ref")),
                            extra_env={"MODE": "reference"})
    return result.result


@pytest.mark.smoke
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


def _check_exits(results):
    for r in results:
        assert r.returncode == 0, r.describe()


def test_dynamic_table_of_hashed_ids(tmp_path, reference):
    """input_dim=None: any int64 id (negative ones too), rows created on first lookup, on the
    servers or, without them, in one process.

    The ids are a one-to-one hash of the reference's and rows start at zeros,
    so training must follow the reference's (a fixed table, one process).
    """
    workers, servers = run_ps_job(tmp_path, "ps_keras.py", env={"DYNAMIC": "1"})
    _check_exits(workers + servers)
    a, b = (w.result for w in workers)
    np.testing.assert_array_equal(a["rows"], b["rows"])
    np.testing.assert_allclose(a["loss"], reference["loss"], rtol=1e-4)
    for x, y in zip(a["dense"], reference["dense"]):
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=1e-6)
    # The same dynamic table with no servers (one process: its rows in this process's store)
    # trains to the servers' rows, losses and predictions.
    (local,) = run_workers(_script("ps_keras.py"), 1, str(tmp_path / "local"),
                           extra_env={"MODE": "reference", "DYNAMIC": "1"})
    np.testing.assert_allclose(local.result["rows"], a["rows"], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(local.result["loss"], a["loss"], rtol=1e-5)
    np.testing.assert_allclose(local.result["predictions"], a["predictions"], rtol=1e-5)


def test_bad_id_is_an_error_naming_table_and_id_and_serving_goes_on(tmp_path, reference):
    workers, servers = run_ps_job(tmp_path, "ps_keras.py", env={"BAD_ID": "1"})
    _check_exits(workers + servers)
    for w in workers:
        message = w.result["bad_id_error"]
        assert message and "items" in message and "1040" in message, message
        # The refused lookup changed nothing: training still equals one process's.
        np.testing.assert_allclose(w.result["rows"], reference["rows"], rtol=1e-4, atol=1e-6)


def test_async_mode_trains(tmp_path):
    """Each push applied on arrival (the workers' halves of a step one after the other)."""
    workers, servers = run_ps_job(tmp_path, "ps_keras.py", env={"PS_MODE": "async", "EPOCHS": "3"})
    _check_exits(workers + servers)
    for w in workers:
        loss = w.result["loss"]
        assert loss[2] < loss[1] < loss[0], loss


def test_dead_worker_stops_the_servers_with_its_name(tmp_path):
    """A worker that vanishes mid-training: the servers exit non-zero naming it, nothing lingers."""
    workers, servers = run_ps_job(tmp_path, "ps_keras.py",
                                  env={"DIE_RANK": "1", "EPOCHS": "3", "TFX_TIMEOUT_S": "20"},
                                  timeout_s=120, kill_on_failure=False)
    assert workers[1].returncode == 3, workers[1].describe()
    # Every process ended by itself (None: still running at the timeout, then killed).
    assert workers[0].returncode not in (0, None), workers[0].describe()
    for s in servers:
        assert s.returncode == 1, s.describe()
        assert "worker 1" in s.stderr, s.describe()


# -- dense variables on the servers (dense_variables="servers") ----------------------------------

@pytest.fixture(scope="module")
def full_reference(tmp_path_factory):
    """One process, no strategy, the FULL=1 program (fit with validation, evaluate, custom loop)."""
    cache = {}

    def get(optimizer, **env):
        key = (optimizer, tuple(sorted(env.items())))
        if key not in cache:
            folder = str(tmp_path_factory.mktemp("ref_" + optimizer))
            (result,) = run_workers(_script("ps_keras.py"), 1, folder,
                                    extra_env={"MODE": "reference", "FULL": "1", "OPTIMIZER": optimizer,
                                               "LR": "0.05", **env})
            cache[key] = result.result
        return cache[key]

    return get


def _assert_close_lists(actual, expected, rtol):
    assert len(actual) == len(expected)
    for a, b in zip(actual, expected):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-6)


def _all_reduced(tmp_path, optimizer):
    """The same job with the dense variables on the workers (all-reduced, Keras's optimizer)."""
    workers, servers = run_ps_job(tmp_path / "workers", "ps_keras.py", env={
        "DENSE": "workers", "FULL": "1", "OPTIMIZER": optimizer, "LR": "0.05"})
    _check_exits(workers + servers)
    return workers[0].result


# CI runs Adam (slots on servers); SGD only under make reliability, for CI time.
@pytest.mark.parametrize("optimizer", [pytest.param("SGD", marks=pytest.mark.long), "Adam"])
def test_dense_variables_on_servers_equal_the_other_placements(tmp_path, full_reference, optimizer):
    """fit (with validation), evaluate, predict and a custom loop with every dense variable held by
    the servers: the workers agree exactly, and every number equals one process's (SGD) or the
    all-reduce placement's (Adam: the table's lazy Adam on the servers is not Keras's dense Adam
    of the one-process local table, so only a job with the table on the servers compares)."""
    reference = full_reference(optimizer) if optimizer == "SGD" else _all_reduced(tmp_path, optimizer)
    workers, servers = run_ps_job(tmp_path / "servers", "ps_keras.py", env={
        "DENSE": "servers", "FULL": "1", "OPTIMIZER": optimizer, "LR": "0.05"})
    _check_exits(workers + servers)
    a, b = (w.result for w in workers)
    for key in ("fit_weights", "loop_weights", "predictions", "rows", "evaluate"):
        assert a[key] == b[key], key  # bit for bit: both read the servers' weights
    assert a["loss"][-1] < a["loss"][0]
    np.testing.assert_allclose(a["loss"], reference["loss"], rtol=1e-4)
    np.testing.assert_allclose(a["val_loss"], reference["val_loss"], rtol=1e-4)
    np.testing.assert_allclose(a["evaluate"], reference["evaluate"], rtol=1e-4)
    # The dense layers' weights (first: the table's anchor, or the one-process local table).
    _assert_close_lists(a["fit_weights"][1:], reference["fit_weights"][1:], rtol=1e-4)
    _assert_close_lists(a["loop_weights"][1:], reference["loop_weights"][1:], rtol=1e-4)
    assert len(a["fit_weights"]) == 5
    # Rows near zero: the two placements sum repeated ids' gradients in different orders
    # (float32), seen up to 3.5e-6 apart; training moves rows by ~1e-3.
    np.testing.assert_allclose(a["rows"], reference["rows"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["predictions"], reference["predictions"], rtol=1e-4, atol=1e-6)
    # Spread by size: the 1,200-float kernel is two rows, one per server; the
    # 300-float bias and kernel and the output bias fill the lighter server.
    placement = a["placement"]
    assert len(placement) == 4, placement
    per_server = np.sum(list(placement.values()), axis=0)
    assert per_server.tolist() == [1324 + 1, 1324], placement  # padded floats per server
    assert max(placement.values(), key=sum) == [1024, 1024], placement


# CI time: the Nadam + weight decay job covers servers' decay; RMSprop equals Keras in tests/embedding.
@pytest.mark.long
def test_rmsprop_with_weight_decay_on_servers_equals_keras(tmp_path, full_reference):
    """RMSprop (momentum, centered) with Keras's weight decay, tables and dense variables on the
    servers: every number equals Keras's own optimizer in one process (a plain Keras variable for
    the table). Every step names every row, where the servers' lazy rule is Keras's dense one."""
    _every_number_equals_keras(tmp_path, full_reference, "RMSprop",
                               '{"momentum": 0.5, "centered": true, "weight_decay": 0.2}')


def test_nadam_with_weight_decay_on_servers_equals_keras(tmp_path, full_reference):
    """Nadam (its momentum-schedule product kept per step) with Keras's weight decay, tables and
    dense variables on the servers, as RMSprop above: every number equals one-process Keras.
    Parameter servers refused Nadam before (no kernel)."""
    _every_number_equals_keras(tmp_path, full_reference, "Nadam",
                               '{"beta_1": 0.8, "weight_decay": 0.2}')


def _every_number_equals_keras(tmp_path, full_reference, optimizer, arguments):
    env = {"EVERY_ROW": "1", "OPTIMIZER_ARGS": arguments}
    reference = full_reference(optimizer, **env)
    workers, servers = run_ps_job(tmp_path, "ps_keras.py", env={
        "DENSE": "servers", "FULL": "1", "OPTIMIZER": optimizer, "LR": "0.05", **env})
    _check_exits(workers + servers)
    a, b = (w.result for w in workers)
    assert a["rows"] == b["rows"] and a["loop_weights"] == b["loop_weights"]
    assert a["loss"][-1] < a["loss"][0]
    np.testing.assert_allclose(a["loss"], reference["loss"], rtol=1e-4)
    _assert_close_lists(a["fit_weights"][1:], reference["fit_weights"][1:], rtol=1e-4)
    _assert_close_lists(a["loop_weights"][1:], reference["loop_weights"][1:], rtol=1e-4)
    np.testing.assert_allclose(a["rows"], reference["rows"], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(a["predictions"], reference["predictions"], rtol=1e-4, atol=1e-6)


def test_dense_variables_option_is_checked():
    import tfx_dist
    with pytest.raises(ValueError, match="dense_variables"):
        tfx_dist.ParameterServerStrategy(dense_variables="ps")


def test_dense_variables_on_servers_refuse_async_mode():
    import tfx_dist
    with pytest.raises(ValueError, match="mode='sync' only"):
        tfx_dist.ParameterServerStrategy(mode="async", dense_variables="servers")
