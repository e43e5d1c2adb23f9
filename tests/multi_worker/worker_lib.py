"""Imported by the worker scripts of the multi-worker tests (runs inside a worker).

``make_strategy()`` builds `tfx_dist.MultiWorkerMirroredStrategy` on the
transport the test asked for with ``TFX_TEST_TRANSPORT``: ``comm`` (tfx_dist's
native collectives, the default when `tfx_dist.comm` exists) or ``python``
(the slow reference transport of ``py_transport.py``).
"""

from __future__ import annotations

import json
import os

import numpy as np

from workers import report  # noqa: F401  (re-exported for worker scripts)


def transport_kind() -> str:
    kind = os.environ.get("TFX_TEST_TRANSPORT")
    if kind:
        return kind
    try:
        from tfx_dist.comm import Communicator, ops  # noqa: F401
        return "comm"
    except Exception:  # not built yet, or its op library is missing
        return "python"


def make_strategy(**kwargs):
    from tfx_dist.multi_worker_mirrored_strategy import MultiWorkerMirroredStrategy

    if transport_kind() == "python" and "transport" not in kwargs:
        from py_transport import PyTransport

        config = json.loads(os.environ["TF_CONFIG"])
        addresses = config["cluster"]["worker"]
        kwargs["transport"] = PyTransport(config["task"]["index"], len(addresses), addresses)
    return MultiWorkerMirroredStrategy(**kwargs)


def rank() -> int:
    return json.loads(os.environ["TF_CONFIG"])["task"]["index"]


def weights_digest(model) -> list:
    """The model's weights as nested lists (JSON-friendly), to compare across workers."""
    return [np.asarray(w).tolist() for w in model.get_weights()]


def regression_data(n=256, features=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, features)).astype("float32")
    w = rng.normal(size=(features, 1)).astype("float32")
    y = (x @ w + 0.1 * rng.normal(size=(n, 1))).astype("float32")
    return x, y
