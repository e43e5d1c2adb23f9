"""Custom training loops, reduce, gather and input sharding on real worker processes."""

import os

import numpy as np

from workers import run_workers

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "custom_loop.py")


def test_custom_loop_two_workers(tmp_path):
    with open(SCRIPT) as f:
        results = [r.result for r in run_workers(f.read(), 2, str(tmp_path), timeout_s=150)]
    r0, r1 = results
    assert r0["num_replicas"] == r1["num_replicas"] == 2
    assert r0["transport"] == r1["transport"] == "CommTransport"
    # No TensorFlow server: every device is a local one.
    assert not [d for d in r0["devices"] + r1["devices"] if "/job:worker" in d]

    # Training: the same losses and weights everywhere (dense and sparse variables).
    np.testing.assert_array_equal(r0["losses"], r1["losses"])
    assert r0["losses"][-1] < r0["losses"][0]
    for a, b in zip(r0["weights"], r1["weights"]):
        np.testing.assert_array_equal(a, b)

    # Replica i (0-based) holds i+1; replica i's `values` is (i+1) x 2 filled with i+1.
    for r in results:
        assert r["reduce_sum_scalar"] == 3.0
        assert r["reduce_mean_scalar"] == 1.5
        np.testing.assert_allclose(r["reduce_mean_axis0"], [5 / 3, 5 / 3])
        assert r["reduce_nest"] == {"a": 3.0, "b": 3.0}
        assert r["gather0"] == [[1.0, 1.0], [2.0, 2.0], [2.0, 2.0]]
        assert r["gather_fn"] == r["gather0"]
        assert r["odd_dtypes"] == {"u32": [1, 1, 1], "b": [1, 1, 1], "i8": [1, 1, 1],
                                   "f16": [1, 1, 1], "i64": [1, 1, 1]}
        assert r["reduce_uint8"] == [3]
        assert r["gather1"] == [[0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
        # The runtime negotiates the order, so a graph's collectives are left unchained.
        assert r["independent_collectives"] == 3 and r["chained_collectives"] == 0
        assert r["independent_results"] == [3.0, 1.5, [1.0, 2.0]]

    # MEAN over the 2 replicas: the runtime divides the sum (no division op in the graph), as
    # TensorFlow's / and //, bit for bit; the int8 sum is carried as int32 and divided here.
    # Divisors that differ between ranks are an error.
    f32 = np.float32([0.1, -2.5, 7.3]) + np.float32([0.7, 1.1, -0.2])
    f16 = np.float16([0.3, -1.7]) + np.float16([1.9, 0.6])
    want = {"f32": (f32 / np.float32(2)).tolist(), "f16": (f16 / np.float16(2)).tolist(),
            "i32": [-2, 2, -2, 2], "i8": [-2, 2]}  # floor: -3 // 2 == -2
    for r in results:
        assert r["mean_eager"] == r["mean_graph"] == want
        assert r["mean_ops"] == [["mean", 2, 1]] * 3 + [["sum", 0, 1]]  # one op per value
        assert r["mean_divisions"] == ["FloorDiv"]  # the int8 mean, carried as int32
        assert "allreduce float32[2] mean divisor=2" in r["mean_mismatch"], r["mean_mismatch"]
        assert "allreduce float32[2] mean divisor=3" in r["mean_mismatch"], r["mean_mismatch"]

    # Sharding: disjoint shards that together hold every element.
    for key, everything in (("data_shard", list(range(64))),
                            ("file_shard", [f * 100 + i for f in range(4) for i in range(6)])):
        assert not set(r0[key]) & set(r1[key]), key
        assert sorted(r0[key] + r1[key]) == everything, key
    # One CPU replica per worker: the dataset is read directly, with the same elements as
    # through TF's multi-device iterator (TFX_DIRECT_INPUT=off).
    for r in results:
        assert r["reader"] == r["reader_from_function"] == "OwnedIterator"
        assert r["reader_off"] == "OwnedMultiDeviceIterator"
        assert r["data_shard_off"] == r["data_shard"]
        assert r["from_function_elements"] == r["from_function_elements_off"]
    assert sorted(r0["from_function_elements"] + r1["from_function_elements"]) == list(range(64))
    # FILE: each worker reads whole files (2 of the 4).
    assert {v // 100 for v in r0["file_shard"]} == {0, 2}
    assert {v // 100 for v in r1["file_shard"]} == {1, 3}

    # TF's per-step "has data" all-reduce: skipped for DATA sharding (every worker gets as
    # many batches), kept for FILE sharding, where workers' data can end at different steps.
    # The same for get_next_as_optional (Keras with steps_per_execution > 1).
    for r in results:
        assert r["input_collectives_data"] == 0 and r["optional_collectives_data"] == 0
        assert r["input_collectives_file"] == 1 and r["optional_collectives_file"] == 1
        assert r["optional_steps_data"] == [4] * 8  # 8 batches of 8, 4 per worker
    assert r0["uneven_file_steps"] == r0["optional_steps_file"] == [2] * 6
    assert r1["uneven_file_steps"] == r1["optional_steps_file"] == [2, 2, 2, 0, 0, 0]
