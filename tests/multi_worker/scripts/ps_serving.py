"""Worker script: serving what parameter servers trained, and reading it back without servers.

PHASE=train (a job with parameter servers; STRATEGY=ps|hybrid): trains a model of
two ShardedEmbedding tables (one combined by "mean", one plain) and saves it as
a tf.train.Checkpoint (CKPT), a .keras file (KERAS) and, with
`tfx_dist.serving.export_for_serving`, a SavedModel (EXPORT); reports its
predictions and the plain model's.

PHASE=plain (one process, no strategy, only `import tfx_dist` before loading):
loads KERAS with keras.models.load_model, then restores CKPT into a freshly
built model; reports each one's predictions or error.

PHASE=serve (one process that never imports tfx_dist): tf.saved_model.load of
each export in EXPORTS (os.pathsep-separated); reports their predictions and
whether any tfx_dist module or op library was loaded.
"""
import json
import os
import sys

import numpy as np

from workers import report

RANK = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]

PHASE = os.environ["PHASE"]
ROWS, GLOBAL_BATCH = 40, 32
rs = np.random.RandomState(0)
items = rs.randint(0, ROWS, (256, 3)).astype("int64")
users = rs.randint(0, ROWS, (256,)).astype("int64")
labels = (((items[:, 0] + users) % 2) == 0).astype("float32")[:, None]
probe = {"items": items[:16], "users": users[:16]}


def build_model(keras, tfx_dist):
    item_ids = keras.Input((3,), dtype="int64", name="items")
    user_ids = keras.Input((), dtype="int64", name="users")
    item_vec = tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", name="item_table")(item_ids)
    user_vec = tfx_dist.layers.ShardedEmbedding(ROWS, 4, name="user_table")(user_ids)
    hidden = keras.layers.Concatenate()([item_vec, user_vec])
    out = keras.layers.Dense(1, activation="sigmoid",
                             kernel_initializer=keras.initializers.GlorotUniform(seed=7))(hidden)
    model = keras.Model({"items": item_ids, "users": user_ids}, out)
    model.compile(keras.optimizers.Adagrad(0.5), "binary_crossentropy")
    return model


def outcome(fn):
    try:
        return {"predictions": np.asarray(fn()).tolist()}
    except Exception as e:  # noqa: BLE001 - the test reads the message
        return {"error": f"{type(e).__name__}: {e}"}


if PHASE == "train":
    import keras
    import tensorflow as tf

    import tfx_dist

    strategy = (tfx_dist.ParameterServerStrategy() if os.environ["STRATEGY"] == "ps"
                else tfx_dist.HybridStrategy(shard_min_bytes=0))
    with strategy.scope():
        model = build_model(keras, tfx_dist)
    model.fit({"items": items, "users": users}, labels, batch_size=GLOBAL_BATCH, epochs=2,
              shuffle=False, verbose=0)
    # The chief's files are the model's; another worker writes a temporary copy (TensorFlow's
    # convention: its table shards still go beside the chief's checkpoint).
    ckpt, keras_path = os.environ["CKPT"], os.environ["KERAS"]
    if RANK != 0:
        ckpt = os.path.join(os.path.dirname(ckpt), f"workertemp_{RANK}", os.path.basename(ckpt))
        keras_path = os.path.join(os.environ["WORKDIR"], f"{RANK}.keras")
    tf.train.Checkpoint(model=model).save(ckpt)
    model.save(keras_path)
    result = {"predictions": model.predict(probe, verbose=0).tolist()}
    serving = getattr(tfx_dist, "serving", None)
    if serving is not None:
        plain = serving.to_plain_model(model)
        result["plain_predictions"] = plain.predict(probe, verbose=0).tolist()
        result["plain_layers"] = sorted(type(layer).__name__ for layer in plain.layers)
        serving.export_for_serving(model, os.environ["EXPORT"])
    report(result)
elif PHASE == "plain":
    import keras
    import tensorflow as tf

    import tfx_dist

    result = {"keras": outcome(
        lambda: keras.models.load_model(os.environ["KERAS"]).predict(probe, verbose=0))}

    def restore():
        model = build_model(keras, tfx_dist)
        model.predict(probe, verbose=0)  # built, so the restore is not deferred
        checkpoint = tf.train.latest_checkpoint(os.path.dirname(os.environ["CKPT"]))
        tf.train.Checkpoint(model=model).restore(checkpoint).assert_existing_objects_matched()
        return model.predict(probe, verbose=0)

    result["checkpoint"] = outcome(restore)
    report(result)
else:
    import tensorflow as tf

    def serve(path):
        served = tf.saved_model.load(path)
        return served.serve({k: tf.constant(v) for k, v in probe.items()})

    result = {path: outcome(lambda: serve(path)) for path in os.environ["EXPORTS"].split(os.pathsep)}
    with open("/proc/self/maps") as f:
        maps = f.read()
    result["tfx_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "tfx_dist")
    result["tfx_libraries"] = sorted({line.split()[-1] for line in maps.splitlines() if "tfx" in line})
    report(result)
