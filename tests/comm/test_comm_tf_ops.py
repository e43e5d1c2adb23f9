"""The TensorFlow ops (TfxAllReduce, TfxAllGather, TfxBroadcast) inside
tf.function, across 2 real processes."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import comm_procs as procs  # noqa: E402


import pytest  # noqa: E402

# The ops' own tests: part of the smoke set run on every supported TensorFlow minor.
pytestmark = pytest.mark.smoke


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_tf_ops_in_tf_function_across_two_processes(transport):
    env = {"TFX_SHM": "1" if transport == "shm" else "0"}
    results = procs.run("tf_worker.py", "tf", 2, env=env, timeout=180)
    for r in results:
        res = r.result
        assert res["transport"] == transport
        assert res["mismatch"] is not None and "ranks disagree" in res["mismatch"], res
        assert "float32[2]" in res["mismatch"] and "float32[3]" in res["mismatch"]
        print(f"rank {r.rank}: 4 KiB all-reduce in tf.function: {res['latency_ms']:.3f} ms")
