"""Serving tables that do not fold into plain weights; BatchNormalization and plain Embeddings
under parameter servers. Real processes: 2 workers + 1 server, one process, 2 MWMS workers.

* A dynamic table (``input_dim=None``) and a fixed one over ``max_table_bytes``, trained under
  ParameterServerStrategy and in one process, are exported by `export_for_serving` as compact
  rows and served by `tf.saved_model.load` in a process that never imports tfx_dist: the
  trained predictions for seen ids, the model's answer with a zero row for an unseen id.
  Before, both were a ValueError ("no id range to copy").
* BatchNormalization's moving statistics (non-trainable, aggregation "none" in Keras 3) were
  updated by each worker from its own half of the batch and never made equal: the workers'
  predictions differed. They must agree, and equal MultiWorkerMirroredStrategy's.
* A large keras.layers.Embedding replicated with no partitioner warns once, naming both fixes.
"""

import os

import numpy as np
import pytest

from test_parameter_server import _script, run_ps_job
from workers import run_workers

SCRIPT = "ps_serving_big.py"


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    root = tmp_path_factory.mktemp("serving_big")
    exports = {name: str(root / name / "export") for name in ("ps", "local")}
    workers, servers = run_ps_job(root / "ps_job", SCRIPT, num_workers=2, num_ps=1,
                                  env={"PHASE": "train", "STRATEGY": "ps", "EXPORT": exports["ps"],
                                       "MAX_TABLE_BYTES": "0", "TFX_HYBRID_SHARD_MIN_BYTES": "65536"})
    for r in workers + servers:
        assert r.returncode == 0, r.describe()
    (local,) = run_workers(_script(SCRIPT), 1, str(root / "local_job"), timeout_s=180,
                           extra_env={"PHASE": "train", "STRATEGY": "local", "EXPORT": exports["local"],
                                      "MAX_TABLE_BYTES": "1000"})
    mwms = run_workers(_script(SCRIPT), 2, str(root / "mwms_job"), timeout_s=180,
                       extra_env={"PHASE": "train", "STRATEGY": "mwms"})
    return root, exports, [w.result for w in workers], local.result, [w.result for w in mwms]


def test_dynamic_and_oversize_tables_served_without_tfx_dist(jobs):
    root, exports, ps, local, _ = jobs
    assert "max_table_bytes" in ps[0]["servable"]["item_table"], ps[0]["servable"]
    assert local["servable"]["item_table"] is None, local["servable"]  # 640 bytes: plain weights
    (served,) = run_workers(_script(SCRIPT), 1, str(root / "serve"), timeout_s=120,
                            extra_env={"PHASE": "serve", "EXPORTS": os.pathsep.join(exports.values())})
    served = served.result
    assert served["tfx_modules"] == [] and served["tfx_libraries"] == [], served
    for name, trained in (("ps", ps[0]), ("local", local)):
        assert "dynamic table" in trained["servable"]["user_table"], trained["servable"]
        assert "compact rows" in trained["plain_error"], trained["plain_error"]
        outcome = served[exports[name]]
        np.testing.assert_allclose(outcome["seen"], trained["seen"], rtol=1e-5, err_msg=name)
        np.testing.assert_allclose(outcome["unseen"], trained["unseen_default"], rtol=1e-5, err_msg=name)


def test_batch_normalization_workers_agree_and_match_mirrored(jobs):
    _, _, ps, _, mwms = jobs
    for key in ("bn", "seen", "dense_bn", "dense_bn_predictions"):
        np.testing.assert_allclose(ps[0][key], ps[1][key], rtol=1e-6, atol=1e-7, err_msg=key)
    for key in ("dense_bn", "dense_bn_predictions"):
        np.testing.assert_allclose(mwms[0][key], mwms[1][key], rtol=1e-6, atol=1e-7, err_msg=key)
        np.testing.assert_allclose(ps[0][key], mwms[0][key], rtol=1e-5, atol=1e-6, err_msg=key)


def test_large_replicated_embedding_warns_once_naming_both_fixes(jobs):
    _, _, ps, _, _ = jobs
    for worker in ps:
        (warning,) = worker["warnings"]
        assert "ReplicatedEmbeddingWarning" in warning and "'big_replicated'" in warning, warning
        assert "variable_partitioner=" in warning and "ShardedEmbedding(2048, 16" in warning, warning
