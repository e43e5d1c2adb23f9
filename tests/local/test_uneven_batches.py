"""Global batches that do not divide by the number of replicas give a single-device run's numbers.

Batch 10 over 4 replicas splits 3/3/3/1 (every batch, the first included); 70
examples in batches of 16 end with a partial batch of 6 (2/2/1/1). SGD makes
a misweighted replica show in the weights at once.
"""

import contextlib

import keras
import numpy as np
import pytest

import tfx_dist
from local.models import CPUS

STRATEGIES = {
    "mirrored": lambda: tfx_dist.MirroredStrategy(CPUS),
    "central_storage": lambda: tfx_dist.CentralStorageStrategy(CPUS),
}


def _data(n=70):
    rng = np.random.default_rng(0)
    x = rng.random((n, 8), dtype=np.float32)
    y = (x[:, :3].argmax(axis=1)).astype("int32")
    return x, y


def _model():
    model = keras.Sequential([
        keras.Input((8,)),
        keras.layers.Dense(16, activation="relu",
                           kernel_regularizer=keras.regularizers.L2(1e-3)),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile(keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def _seeded_model(strategy):
    """The model, seeded, under ``strategy`` (None: no strategy, one device)."""
    keras.utils.set_random_seed(0)
    with strategy.scope() if strategy else contextlib.nullcontext():
        return _model()


def _run(strategy, batch_size):
    """fit (2 epochs), evaluate, predict; the weights after fit."""
    x, y = _data()
    model = _seeded_model(strategy)
    history = model.fit(x, y, batch_size=batch_size, epochs=2, shuffle=False, verbose=0)
    return {
        "loss": history.history["loss"],
        "accuracy": history.history["accuracy"],
        "weights": model.get_weights(),
        "evaluate": model.evaluate(x, y, batch_size=batch_size, verbose=0),
        "predict": model.predict(x, batch_size=batch_size, verbose=0),
    }


@pytest.mark.parametrize("batch_size", [10, 16], ids=["batch10_first_uneven", "batch16_last_partial"])
@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_uneven_batches_match_a_single_device(name, batch_size):
    expected = _run(None, batch_size)
    got = _run(STRATEGIES[name](), batch_size)
    for w_got, w_expected in zip(got["weights"], expected["weights"]):
        np.testing.assert_allclose(w_got, w_expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    np.testing.assert_allclose(got["accuracy"], expected["accuracy"], rtol=1e-5)
    np.testing.assert_allclose(got["evaluate"], expected["evaluate"], rtol=1e-5)
    np.testing.assert_allclose(got["predict"], expected["predict"], rtol=1e-5, atol=1e-6)



def test_evaluate_first_builds_the_model_from_an_uneven_batch():
    # The model is built by the first evaluate, not by fit (MirroredStrategy
    # failed there with "AddN ... [3,8] != [1,8]").
    x, y = _data()
    results = []
    for strategy in (None, STRATEGIES["mirrored"]()):
        model = _seeded_model(strategy)
        results.append(model.evaluate(x, y, batch_size=10, verbose=0))
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)
