"""One Keras file format for every table placement, on real processes.

A model is trained and saved (save_weights, model.save) under
ParameterServerStrategy (2 workers, 2 servers), HybridStrategy (2 workers, the
table sharded over them) and no strategy (one process, a local table); each
file then loads under the two others (load_weights, load_model) and predicts
what the saving model predicted. Loaded with compile=True, the optimizer comes
back (its step count) and trains on; Keras's slots of a table saved under
another placement restart with a warning naming the table (an anchor's slots
and a whole table's are not the same state), except between the two
placements whose slots the store keeps (ps and hybrid), which carry them.
"""

import os

import numpy as np
import pytest

from test_parameter_server import run_ps_job
from workers import run_workers

SCRIPT = "cross_placement_keras_files.py"
PLACEMENTS = {"ps": "on_servers", "hybrid": "on_workers", "none": "local"}


def _job(tmp_path, strategy, folder, mode, sources=()):
    env = {"STRATEGY": strategy, "MODE": mode, "DIR": str(folder), "FROM": ",".join(sources)}
    workdir = tmp_path / f"{mode}-{strategy}"
    if strategy == "ps":
        workers, servers = run_ps_job(workdir, SCRIPT, env=env, timeout_s=300)
        for r in workers + servers:
            assert r.returncode == 0, r.describe()
    else:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", SCRIPT)) as f:
            workers = run_workers(f.read(), 2 if strategy == "hybrid" else 1, str(workdir),
                                  timeout_s=300, extra_env=env)
    results = [w.result for w in workers]
    for r in results:
        assert r["placement"] == PLACEMENTS[strategy]
    return results


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cross_placement")
    folder = tmp / "shared"
    folder.mkdir()
    return tmp, folder, {s: _job(tmp, s, folder, "save")[0] for s in PLACEMENTS}


@pytest.mark.parametrize("target", sorted(PLACEMENTS))
def test_files_of_the_other_placements_predict_the_same(saved, target):
    tmp, folder, by_saver = saved
    assert not [f for f in os.listdir(folder) if ".shard-" in f or f.startswith(".tfx_table")]
    sources = [s for s in sorted(PLACEMENTS) if s != target]
    for loaded in _job(tmp, target, folder, "load", sources):
        for source in sources:
            expected = by_saver[source]["predictions"]
            assert np.std(expected) > 1e-3  # trained: the rows differ
            for kind in ("weights.h5", "keras"):
                np.testing.assert_allclose(loaded[f"{source}.{kind}"], expected, rtol=1e-6,
                                           atol=1e-7, err_msg=f"{source}.{kind} under {target}")
            restarts = "none" in (source, target)  # a local table's slots vs an anchor's
            assert loaded[f"{source}.restarted"] == (["items"] if restarts else []), (source, target)
            assert loaded[f"{source}.iterations"] == by_saver[source]["iterations"]
            assert np.isfinite(loaded[f"{source}.losses"]).all()
