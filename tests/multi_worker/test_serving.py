"""Serving what was trained, on real processes: no live job, no tfx_dist in the serving process.

One job with a parameter server and one of 2 workers sharing the tables
(HybridStrategy) each train a model of two ShardedEmbedding tables and save
it three ways. A plain process (only ``import tfx_dist``, no strategy) must
load the ``.keras`` file and restore the server job's tf.train.Checkpoint into
a freshly built model with the trained predictions: before, the first failed
("Could not locate class 'ShardedEmbedding'") and the second silently
restored the model without its tables. A process that never imports tfx_dist
must serve both SavedModels that `tfx_dist.serving.export_for_serving` wrote,
with the trained predictions.
"""

import os

import numpy as np
import pytest

from test_parameter_server import _script, run_ps_job
from workers import run_workers


def _paths(folder):
    return {"CKPT": str(folder / "ckpt" / "c"), "KERAS": str(folder / "m.keras"),
            "EXPORT": str(folder / "export")}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """{"ps" | "hybrid": (paths, the chief's result)}."""
    root = tmp_path_factory.mktemp("serving")
    jobs = {}
    ps = _paths(root / "ps")
    workers, servers = run_ps_job(root / "ps_job", "ps_serving.py", num_workers=1, num_ps=1,
                                  env={"PHASE": "train", "STRATEGY": "ps", **ps})
    for r in workers + servers:
        assert r.returncode == 0, r.describe()
    jobs["ps"] = (ps, workers[0].result)
    hybrid = _paths(root / "hybrid")
    results = run_workers(_script("ps_serving.py"), 2, str(root / "hybrid_job"), timeout_s=180,
                          extra_env={"PHASE": "train", "STRATEGY": "hybrid", **hybrid})
    np.testing.assert_array_equal(results[0].result["plain_predictions"],
                                  results[1].result["plain_predictions"])
    jobs["hybrid"] = (hybrid, results[0].result)
    return root, jobs


def test_plain_model_of_keras_layers_predicts_what_was_trained(trained):
    _, jobs = trained
    for name, (_, result) in jobs.items():
        assert "ShardedEmbedding" not in result["plain_layers"], (name, result["plain_layers"])
        assert "Embedding" in result["plain_layers"], (name, result["plain_layers"])
        np.testing.assert_allclose(result["plain_predictions"], result["predictions"], rtol=1e-5,
                                   err_msg=name)


def test_export_served_by_a_process_without_tfx_dist(trained):
    root, jobs = trained
    exports = [paths["EXPORT"] for paths, _ in jobs.values()]
    (served,) = run_workers(_script("ps_serving.py"), 1, str(root / "serve"), timeout_s=120,
                            extra_env={"PHASE": "serve", "EXPORTS": os.pathsep.join(exports)})
    assert served.result["tfx_modules"] == [] and served.result["tfx_libraries"] == [], served.result
    for (paths, result) in jobs.values():
        outcome = served.result[paths["EXPORT"]]
        assert "predictions" in outcome, outcome
        np.testing.assert_allclose(outcome["predictions"], result["predictions"], rtol=1e-5)


def test_server_files_load_into_a_plain_process_with_only_import_tfx_dist(trained):
    """The .keras file loads; the checkpoint restores the tables (from the servers' shard
    files) rather than silently leaving them initial."""
    root, jobs = trained
    paths, result = jobs["ps"]
    (plain,) = run_workers(_script("ps_serving.py"), 1, str(root / "plain"), timeout_s=120,
                           extra_env={"PHASE": "plain", **paths})
    for way in ("keras", "checkpoint"):
        outcome = plain.result[way]
        assert "predictions" in outcome, (way, outcome)
        np.testing.assert_allclose(outcome["predictions"], result["predictions"], rtol=1e-5,
                                   err_msg=way)
