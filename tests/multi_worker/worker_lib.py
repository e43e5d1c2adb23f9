"""Imported by the worker scripts of the multi-worker tests (runs inside a worker).

``make_strategy()`` builds `tfx_dist.MultiWorkerMirroredStrategy` on tfx_dist's
native collectives (`tfx_dist.comm`).
"""

from __future__ import annotations

import json
import os

import numpy as np

from workers import report  # noqa: F401  (re-exported for worker scripts)


def make_strategy(**kwargs):
    from tfx_dist.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy

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


def click_model(inputs, features, hidden_units: int, learning_rate: float):
    """The click model of the Keras-file scripts: ``features`` through Dense(tanh) "hidden" and
    Dense(1, sigmoid) "out", seeded (the same start on every worker and in every run),
    compiled with Adagrad. Called in the strategy's scope."""
    import keras

    hidden = keras.layers.Dense(hidden_units, activation="tanh", name="hidden",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=5))(features)
    outputs = keras.layers.Dense(1, activation="sigmoid", name="out",
                                 kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model(inputs, outputs)
    model.compile(keras.optimizers.Adagrad(learning_rate), "binary_crossentropy")
    return model
