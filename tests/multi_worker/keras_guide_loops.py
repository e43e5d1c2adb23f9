"""Training programs as the keras.io and tensorflow.org guides write them, with one strategy line.

Each shape is a function ``shape(strategy) -> {name: list of arrays}`` (the
weights and metric results it ends with); ``strategy=None`` runs it on one
device, without a strategy, on the same global batches. The tests compare the
two with rtol 1e-5. Used by ``tests/local/test_keras_guides.py`` (one process, 4
logical CPUs) and ``scripts/keras_guides.py`` (worker processes, parameter
servers), so every strategy runs the same programs.
"""

from __future__ import annotations

import contextlib

import keras
import numpy as np
import tensorflow as tf

GLOBAL_BATCH = 16
OPTIMIZERS = ("SGD", "Adam", "Adagrad", "RMSprop", "Ftrl")


def _scope(strategy):
    return strategy.scope() if strategy else contextlib.nullcontext()


def _classification(n=64):
    rng = np.random.default_rng(0)
    x = rng.random((n, 8), dtype=np.float32)
    y = x[:, :3].argmax(axis=1).astype("int32")
    return x, y


def _mlp(classes=3, seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                             keras.layers.Dense(classes)])


def _batches(strategy, *arrays):
    dataset = tf.data.Dataset.from_tensor_slices(arrays).batch(GLOBAL_BATCH)
    return strategy.experimental_distribute_dataset(dataset) if strategy else dataset


def _run(strategy, step, batch):
    """``step`` on one batch: through ``strategy.run``, or called as is on one device."""
    return strategy.run(step, args=batch) if strategy else step(*batch)


def _arrays(values):
    return [np.asarray(v) for v in values]


def tf_function_step(strategy):
    """keras.io "Writing a training loop from scratch", its speed-up section: a
    ``@tf.function`` step with ``optimizer.apply`` and a metric inside, given to ``strategy.run``."""
    x, y = _classification()
    with _scope(strategy):
        model = _mlp()
        optimizer = keras.optimizers.Adam(0.01)
        loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        accuracy = keras.metrics.SparseCategoricalAccuracy()

    @tf.function
    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = loss_fn(yb, logits)
        grads = tape.gradient(loss, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)
        accuracy.update_state(yb, logits)
        return loss

    for _ in range(2):
        for batch in _batches(strategy, x, y):
            _run(strategy, train_step, batch)
    return {"weights": _arrays(model.get_weights()), "accuracy": [np.asarray(accuracy.result())]}


def apply_gradients_loop(strategy):
    """tensorflow.org "Custom training with tf.distribute.Strategy": a plain step with
    ``apply_gradients``, ``tf.nn.compute_average_loss`` and metrics, ``strategy.run`` inside a
    ``@tf.function``."""
    x, y = _classification()
    with _scope(strategy):
        model = _mlp()
        optimizer = keras.optimizers.SGD(0.5)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        accuracy = keras.metrics.SparseCategoricalAccuracy()
        mean_loss = keras.metrics.Mean()

    def train_step(xb, yb):
        with tf.GradientTape() as tape:
            logits = model(xb, training=True)
            loss = tf.nn.compute_average_loss(loss_object(yb, logits), global_batch_size=GLOBAL_BATCH)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        accuracy.update_state(yb, logits)
        return loss

    @tf.function
    def distributed_train_step(xb, yb):
        losses = _run(strategy, train_step, (xb, yb))
        return strategy.reduce("SUM", losses, axis=None) if strategy else losses

    for _ in range(2):
        for batch in _batches(strategy, x, y):
            mean_loss.update_state(distributed_train_step(*batch))
    return {"weights": _arrays(model.get_weights()), "accuracy": [np.asarray(accuracy.result())],
            "loss": [np.asarray(mean_loss.result())]}


def embedding_optimizers(strategy):
    """``keras.layers.Embedding`` trained with each optimizer, ids repeated within and across
    the replicas' rows: one model per optimizer, all stepped by one ``strategy.run`` in a
    ``@tf.function`` (one trace instead of a ``fit`` each; Keras's optimizer step is the same)."""
    rs = np.random.RandomState(0)
    ids = rs.randint(0, 6, (64, 3)).astype("int32")
    y = rs.rand(64, 1).astype("float32")
    keras.utils.set_random_seed(0)
    with _scope(strategy):
        models = [keras.Sequential([keras.Input((3,), dtype="int32"), keras.layers.Embedding(6, 4),
                                    keras.layers.Flatten(), keras.layers.Dense(1)]) for _ in OPTIMIZERS]
        optimizers = [getattr(keras.optimizers, name)(0.1) for name in OPTIMIZERS]
        loss_fn = keras.losses.MeanSquaredError()

    def train_step(ib, yb):
        for model, optimizer in zip(models, optimizers):
            with tf.GradientTape() as tape:
                loss = loss_fn(yb, model(ib, training=True))
            optimizer.apply(tape.gradient(loss, model.trainable_weights), model.trainable_weights)

    @tf.function
    def distributed_train_step(ib, yb):
        _run(strategy, train_step, (ib, yb))

    for _ in range(2):
        for batch in _batches(strategy, ids, y):
            distributed_train_step(*batch)
    return {f"embedding_{name}": _arrays(model.get_weights())
            for name, model in zip(OPTIMIZERS, models)}


class RowsSeen(keras.metrics.Metric):
    """A custom metric whose ``result()`` returns its state variable itself."""

    def __init__(self, name="rows_seen", **kwargs):
        super().__init__(name=name, **kwargs)
        self.total = self.add_variable(shape=(), initializer="zeros", name="total")

    def update_state(self, y_true, y_pred, sample_weight=None):
        self.total.assign_add(tf.cast(tf.shape(y_true)[0], self.total.dtype))

    def result(self):
        return self.total


def metric_returning_variable(strategy):
    """``fit`` and ``evaluate`` with a metric whose ``result()`` is its variable."""
    x, y = _classification()
    with _scope(strategy):
        model = _mlp()
        model.compile(keras.optimizers.SGD(0.5),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                      metrics=[RowsSeen(), "accuracy"])
    history = model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    evaluated = model.evaluate(x, y, batch_size=GLOBAL_BATCH, verbose=0, return_dict=True)
    return {"weights": _arrays(model.get_weights()),
            "history_rows_seen": [np.asarray(history.history["rows_seen"])],
            "evaluate": [np.asarray([evaluated[k] for k in sorted(evaluated)])]}


class GAN(keras.Model):
    """keras.io "Customizing what happens in fit()", its GAN: two models, two optimizers, one
    ``train_step``. The latent vectors come with the data, so every run draws the same ones."""

    def __init__(self, discriminator, generator):
        super().__init__()
        self.discriminator, self.generator = discriminator, generator
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    def call(self, images):
        # Keras builds every model it fits under a strategy (TensorFlow's too): without a
        # call() that fails with "Unable to automatically build the model".
        return self.discriminator(images)

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def train_step(self, data):
        real, latent = data
        fake = self.generator(latent)
        combined = tf.concat([fake, real], axis=0)
        labels = tf.concat([tf.ones_like(real[:, :1]), tf.zeros_like(real[:, :1])], axis=0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(tf.zeros_like(real[:, :1]), self.discriminator(self.generator(latent)))
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply(grads, self.generator.trainable_weights)
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


def gan_fit(strategy):
    rng = np.random.default_rng(1)
    real = rng.normal(size=(64, 4)).astype("float32")
    latent = rng.normal(size=(64, 2)).astype("float32")
    keras.utils.set_random_seed(0)
    with _scope(strategy):
        discriminator = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"),
                                          keras.layers.Dense(1)])
        generator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(4)])
        gan = GAN(discriminator, generator)
        gan.compile(keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01),
                    keras.losses.BinaryCrossentropy(from_logits=True))
    # Not compared: the logged losses. Under any strategy a Keras loss object returns the
    # replica's scaled share (for the gradient sum), which these trackers average.
    gan.fit(tf.data.Dataset.from_tensor_slices((real, latent)).batch(GLOBAL_BATCH), epochs=2, verbose=0)
    return {"weights": _arrays(discriminator.get_weights() + generator.get_weights())}


def accumulation_fit(strategy):
    """Keras's own gradient accumulation (``gradient_accumulation_steps``) in ``fit``: refused
    with several replicas (see `REFUSED`)."""
    x, y = _classification()
    with _scope(strategy):
        model = _mlp()
        model.compile(keras.optimizers.Adam(0.01, gradient_accumulation_steps=2),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
    return {"weights": _arrays(model.get_weights())}


def accumulation_loop(strategy):
    """Gradient accumulation written by hand (tensorflow.org forums' shape): each replica
    sums its gradients into ``ON_READ``/``SUM`` variables for 2 batches, then the summed
    gradients are applied by ``apply_gradients`` in a second ``strategy.run``."""
    x, y = _classification()
    with _scope(strategy):
        model = _mlp()
        optimizer = keras.optimizers.SGD(0.5)
        loss_object = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
        sums = [tf.Variable(tf.zeros_like(v), trainable=False,
                            synchronization=tf.VariableSynchronization.ON_READ,
                            aggregation=tf.VariableAggregation.SUM) for v in model.trainable_variables]

    def accumulate(xb, yb):
        with tf.GradientTape() as tape:
            loss = tf.nn.compute_average_loss(loss_object(yb, model(xb, training=True)),
                                              global_batch_size=2 * GLOBAL_BATCH)
        for total, grad in zip(sums, tape.gradient(loss, model.trainable_variables)):
            total.assign_add(grad)

    def apply():
        # In a replica, an ON_READ variable reads this replica's sum; Keras's apply then sums
        # the replicas'.
        grads = [tf.convert_to_tensor(total) for total in sums]
        optimizer.apply_gradients(zip(grads, model.trainable_variables))

    @tf.function
    def accumulate_step(xb, yb):
        _run(strategy, accumulate, (xb, yb))

    @tf.function
    def apply_step():
        _run(strategy, apply, ())
        for total in sums:
            total.assign(tf.zeros_like(total))

    for _ in range(2):
        for i, batch in enumerate(_batches(strategy, x, y)):
            accumulate_step(*batch)
            if i % 2 == 1:
                apply_step()
    return {"weights": _arrays(model.get_weights())}


# Shapes that cannot run with several replicas, and what their error must say instead.
REFUSED = {"accumulation_fit": "synchronization=tf.VariableSynchronization.ON_READ"}

SHAPES = {
    "tf_function_step": tf_function_step,
    "apply_gradients_loop": apply_gradients_loop,
    "embedding_optimizers": embedding_optimizers,
    "metric_returning_variable": metric_returning_variable,
    "gan_fit": gan_fit,
    "accumulation_fit": accumulation_fit,
    "accumulation_loop": accumulation_loop,
}


def run_shape(name, strategy):
    """``{"ok": {key: list of lists}}`` or ``{"error": "Type: message"}`` (JSON-friendly).
    Without a strategy a `REFUSED` shape is not run (nothing compares with it)."""
    if strategy is None and name in REFUSED:
        return {"ok": {}}
    try:
        result = SHAPES[name](strategy)
    except Exception as e:  # noqa: BLE001 - the test reads the message
        message = f"{type(e).__name__}: {e}"
        # TensorFlow's "in user code:" errors end with the cause.
        return {"error": message if len(message) < 2400 else message[:400] + " ... " + message[-2000:]}
    return {"ok": {k: [np.asarray(a).tolist() for a in v] for k, v in result.items()}}


def assert_same(got, expected, rtol=1e-5, atol=1e-6, shape=None):
    """Each array of ``got`` equals ``expected``'s (``run_shape`` results); for a `REFUSED`
    ``shape``, ``got`` is the error that says what to write instead."""
    if shape in REFUSED:
        assert "error" in got and "UnimplementedError" in got["error"], got
        assert REFUSED[shape] in got["error"], got["error"]
        return
    assert "error" not in got, got["error"]
    assert "error" not in expected, expected["error"]
    assert sorted(got["ok"]) == sorted(expected["ok"])
    for key, arrays in expected["ok"].items():
        assert len(got["ok"][key]) == len(arrays), key
        for a, b in zip(got["ok"][key], arrays):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol, err_msg=key)
