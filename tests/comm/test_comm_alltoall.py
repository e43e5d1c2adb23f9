"""All-to-all with splits and reduce-scatter (numpy API and TF ops, eager and
tf.function, gradients, errors) across 3 real processes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import comm_procs as procs  # noqa: E402


def test_alltoall_and_reducescatter_across_three_processes():
    results = procs.run("alltoall_worker.py", "a2a", 3, timeout=240)
    for r in results:
        res = r.result
        assert "one split per rank (3); got 4" in res["bad_splits_np"], res
        assert "splits must be >= 0" in res["bad_splits_tf"], res
        for key in ("mismatch", "mismatch_np"):
            assert res[key] is not None and "ranks disagree" in res[key], res
            assert "rank 1 submitted alltoall float32[3,3]" in res[key], res
            assert "rank 0 submitted alltoall float32[3,2]" in res[key], res
