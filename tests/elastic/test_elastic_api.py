"""tfx_dist.elastic's state and run loop with real processes: resets forced on every rank of a
2-worker job (same members; each reset rebuilds the communicator at a new generation)."""

import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "multi_worker"))

import workers  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def test_resets_keep_the_weights_of_an_uninterrupted_run():
    result, _ = workers.launch_script(os.path.join(HERE, "elastic_api_worker.py"), {})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = workers.rank0_report(result)
    # Three resets in all: workers-changed and lost-peer in the loop, workers-changed in fit.
    assert out["generation"] == 3
    (plain_w, plain_calls, plain_steps), (w, calls, steps) = out["loop"]
    assert plain_calls == [0] and calls == [0, 4, 6]  # called again at the commit it resumed from
    assert plain_steps == steps == 13  # the lost step redone: its update (and count) rolled back
    for a, b in zip(plain_w, w):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    (plain_w, plain_fits, plain_epochs), (w, fits, epochs) = out["fit"]
    assert plain_fits == [0] and fits == [0, 1] and plain_epochs == epochs == 3
    for a, b in zip(plain_w, w):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
