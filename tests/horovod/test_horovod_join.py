"""hvd.join with Horovod 0.28.1's semantics on 2 real processes: ranks with
different numbers of batches of a DistributedOptimizer training; the joined
ranks add zeros to the others' all-reduces (Average still divides by size), an
allgather while a rank has joined fails, join returns the last rank to join.
Checked against the same training in numpy."""

from __future__ import annotations

import importlib.util
import os

import numpy as np

import workers

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "scripts", "join_uneven.py")


def _script_constants():
    """STEPS, LR and batch() from the worker script, without running it (it starts Horovod)."""
    src = open(SCRIPT).read()
    namespace = {"np": np}
    exec(src[src.index("STEPS = "):src.index("hvd.init()")], namespace)  # noqa: S102 - our own file
    exec(src[src.index("def batch("):src.index("@tf.function")], namespace)  # noqa: S102
    return namespace["STEPS"], namespace["LR"], namespace["batch"]


def _reference(steps, lr, batch):
    """Weights of each rank after its last step, and each step's summed loss, in numpy."""
    n = len(steps)
    w = np.ones((4, 2))
    weights, loss_sums = {}, []
    for s in range(max(steps)):
        active = [r for r in range(n) if steps[r] > s]
        grad_sum, loss_sum = np.zeros_like(w), 0.0
        for r in active:
            x, t = (a.astype(np.float64) for a in batch(r, s))
            err = x @ w - t
            loss_sum += float(np.mean(err ** 2))
            grad_sum += 2.0 / err.size * x.T @ err
        w = w - lr * grad_sum / n  # joined ranks add zeros; Average divides by size
        loss_sums.append(loss_sum)
        for r in range(n):
            if steps[r] == s + 1:
                weights[r] = w.copy()
    return weights, loss_sums


def test_join_lets_ranks_with_different_numbers_of_batches_train(tmp_path):
    steps, lr, batch = _script_constants()
    with open(SCRIPT) as f:
        results = workers.run_workers(f.read(), len(steps), str(tmp_path), timeout_s=240)
    weights, loss_sums = _reference(steps, lr, batch)
    last = int(np.argmax(steps))
    for rank, res in enumerate(results):
        got = res.result
        np.testing.assert_allclose(got["weights"], weights[rank], rtol=1e-5, atol=1e-6,
                                   err_msg=f"rank {rank}'s weights after its {steps[rank]} steps")
        np.testing.assert_allclose(got["loss_sums"], loss_sums[:steps[rank]], rtol=1e-5,
                                   err_msg=f"rank {rank}'s summed losses")
        assert got["last"] == last, f"rank {rank}: join returned {got['last']}, expected {last}"
        assert got["after"] == sum(range(1, len(steps) + 1)), got  # every rank again once all joined
        if rank == last:
            assert got["error"] and "allgather" in got["error"] and "have joined" in got["error"], got
        else:
            assert got["error"] is None
