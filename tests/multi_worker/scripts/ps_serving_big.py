"""Worker script: serving tables that do not fold into plain weights, BatchNormalization on many
workers, and the warning of a large replicated keras.layers.Embedding.

PHASE=train, STRATEGY=ps (workers + parameter servers) | local (one process, no strategy):
trains a model of a dynamic ShardedEmbedding (hashed int64 user ids), a fixed one
(items) and BatchNormalization; exports it with `export_for_serving` to EXPORT (the dynamic
table as compact rows; the fixed one too if over MAX_TABLE_BYTES, as on the servers with 0: a
table in a Keras variable, one process's, must fold); reports predictions on seen ids, the prediction
the model's head gives an unseen user id with a zero row, and the BatchNormalization
statistics. STRATEGY=ps|mwms also trains a dense model with BatchNormalization (no tables)
and reports its statistics; ps records the warnings of building a large and a small
keras.layers.Embedding with no partitioner.

PHASE=serve (never imports tfx_dist): tf.saved_model.load of each of EXPORTS on the seen and the
unseen probes; reports the predictions and any tfx_dist module or library loaded.
"""
import json
import os
import sys

import numpy as np

from workers import report

RANK = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
PHASE, STRATEGY = os.environ["PHASE"], os.environ.get("STRATEGY", "")
ITEMS, N, GLOBAL_BATCH = 40, 256, 32
rs = np.random.RandomState(0)
user_keys = rs.randint(0, 30, N)
users = (user_keys * 1_000_000_007 - 9_000_000_000).astype("int64")  # hashed ids, negative too
items = rs.randint(0, ITEMS, N).astype("int64")
dense = rs.normal(size=(N, 4)).astype("float32")
labels = (((user_keys + items) % 2) == 0).astype("float32")[:, None]
seen = {"users": users[:16], "items": items[:16], "dense": dense[:16]}
unseen = {"users": np.array([123456789, -5, 7], "int64"), "items": items[:3], "dense": dense[:3]}


def build_model(keras, tfx_dist):
    user_ids = keras.Input((), dtype="int64", name="users")
    item_ids = keras.Input((), dtype="int64", name="items")
    features = keras.Input((4,), name="dense")
    user_vec = tfx_dist.layers.ShardedEmbedding(None, 4, name="user_table")(user_ids)
    item_vec = tfx_dist.layers.ShardedEmbedding(ITEMS, 4, name="item_table")(item_ids)
    hidden = keras.layers.Concatenate()([user_vec, item_vec, features])
    hidden = keras.layers.Dense(8, activation="relu", name="hidden",
                                kernel_initializer=keras.initializers.GlorotUniform(seed=3))(hidden)
    hidden = keras.layers.BatchNormalization(name="bn")(hidden)
    out = keras.layers.Dense(1, activation="sigmoid", name="out",
                             kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model({"users": user_ids, "items": item_ids, "dense": features}, out)
    model.compile(keras.optimizers.Adagrad(0.3), "binary_crossentropy")
    return model


def build_dense_bn_model(keras):
    model = keras.Sequential([keras.Input((4,)),
                              keras.layers.Dense(6, kernel_initializer=keras.initializers.GlorotUniform(1)),
                              keras.layers.BatchNormalization(name="bn", momentum=0.5),
                              keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(2))])
    # LossScaleOptimizer: its non-trainable dynamic_scale, assigned inside a tf.cond, must stay
    # unaveraged (an all-reduce there fails).
    model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)), "mse")
    return model


def head_with_zero_user(model, probe):
    """What the model predicts for ``probe`` when the user's row is zeros (the documented default
    for an id the exported table does not hold), in NumPy from the trained weights."""
    item_rows = np.asarray(model.get_layer("item_table").table.lookup(probe["items"]))
    x = np.concatenate([np.zeros((len(probe["users"]), 4), "float32"), item_rows, probe["dense"]], 1)
    w, b = model.get_layer("hidden").get_weights()
    h = np.maximum(x @ w + b, 0)
    gamma, beta, mean, var = model.get_layer("bn").get_weights()
    h = gamma * (h - mean) / np.sqrt(var + model.get_layer("bn").epsilon) + beta
    w, b = model.get_layer("out").get_weights()
    return (1 / (1 + np.exp(-(h @ w + b)))).tolist()


def bn_stats(model):
    layer = model.get_layer("bn")
    return [np.asarray(layer.moving_mean).tolist(), np.asarray(layer.moving_variance).tolist()]


if PHASE == "train":
    import warnings

    import keras

    import tfx_dist

    result = {}
    strategy = {"ps": tfx_dist.ParameterServerStrategy, "mwms": tfx_dist.MultiWorkerMirroredStrategy,
                "local": lambda: None}[STRATEGY]()
    scope = strategy.scope() if strategy is not None else warnings.catch_warnings()
    if STRATEGY in ("ps", "mwms"):
        with strategy.scope():
            bn_model = build_dense_bn_model(keras)
        bn_model.fit(dense, labels, batch_size=GLOBAL_BATCH, epochs=2, shuffle=False, verbose=0)
        result["dense_bn"] = bn_stats(bn_model)
        result["dense_bn_predictions"] = bn_model.predict(dense[:16], verbose=0).tolist()
    if STRATEGY == "ps":
        with warnings.catch_warnings(record=True) as caught, strategy.scope():
            warnings.simplefilter("always")
            big = keras.layers.Embedding(2048, 16, name="big_replicated")  # 131,072 bytes
            small = keras.layers.Embedding(8, 4, name="small_replicated")
            ids = keras.Input((), dtype="int64")
            keras.Model(ids, [big(ids), small(ids), big(ids)])
            big.build((None,))  # built again: still one warning
        result["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught
                              if "Embedding" in w.category.__name__]
    if STRATEGY in ("ps", "local"):
        with scope:
            model = build_model(keras, tfx_dist)
        model.fit({"users": users, "items": items, "dense": dense}, labels, batch_size=GLOBAL_BATCH,
                  epochs=3, shuffle=False, verbose=0)
        limit = int(os.environ["MAX_TABLE_BYTES"])
        result["servable"] = tfx_dist.serving.servable_tables(model, max_table_bytes=limit)
        result["seen"] = model.predict(seen, verbose=0).tolist()
        result["unseen_default"] = head_with_zero_user(model, unseen)
        result["bn"] = bn_stats(model)
        tfx_dist.serving.export_for_serving(model, os.environ["EXPORT"], max_table_bytes=limit)
        try:
            tfx_dist.serving.to_plain_model(model)
        except ValueError as e:
            result["plain_error"] = str(e)
    report(result)
else:
    import tensorflow as tf

    def serve(path):
        served = tf.saved_model.load(path)
        return {name: np.asarray(served.serve({k: tf.constant(v) for k, v in probe.items()})).tolist()
                for name, probe in (("seen", seen), ("unseen", unseen))}

    result = {path: serve(path) for path in os.environ["EXPORTS"].split(os.pathsep)}
    with open("/proc/self/maps") as f:
        maps = f.read()
    result["tfx_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "tfx_dist")
    result["tfx_libraries"] = sorted({line.split()[-1] for line in maps.splitlines() if "tfx" in line})
    report(result)
