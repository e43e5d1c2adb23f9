"""Wide & Deep and Deep & Cross networks on forest cover data (keras-io's example), on a tfx_dist strategy.

The program keras-io teaches ("Structured data learning with Wide, Deep, and
Cross networks"): the Covertype schema (10 numeric features, the string
features ``Wilderness_Area`` and ``Soil_Type``, 7 classes) read from CSV with
``tf.data.experimental.make_csv_dataset``; string features through
``StringLookup`` inside the model, one-hot for the wide part and
``keras.layers.Embedding`` for the deep and cross parts; batch normalization,
dropout, Adam, sparse categorical cross-entropy. Two things differ from
keras-io: the data are generated here with the same schema (`write_covertype`:
no download; the class is a planted function of the features), and the
strategy is one line (`common.make_strategy`).

    tfx-dist-run -n 2 --ps 1 python examples/recsys/wide_deep_cross.py --strategy ps
    tfx-dist-run -n 2 python examples/recsys/wide_deep_cross.py --strategy hybrid

``--model wide_deep`` or ``deep_cross`` (default) picks keras-io's experiment;
``--layer sharded`` uses `tfx_dist.layers.ShardedEmbedding` instead of Keras's
layer. The chief exports the trained model (``--export``) for a process
without tfx_dist (`examples/recsys/serve.py`).
"""

import json
import math
import os

import keras
import numpy as np
import pandas as pd
import tensorflow as tf
from keras import layers

import tfx_dist
from common import LAYERS, make_strategy, parse_args, write_once

NUMERIC_FEATURE_NAMES = [
    "Aspect", "Elevation", "Hillshade_3pm", "Hillshade_9am", "Hillshade_Noon",
    "Horizontal_Distance_To_Fire_Points", "Horizontal_Distance_To_Hydrology",
    "Horizontal_Distance_To_Roadways", "Slope", "Vertical_Distance_To_Hydrology"]
VOCABULARY = {"Soil_Type": [f"C{7000 + 13 * i}" for i in range(40)],
              "Wilderness_Area": ["Rawah", "Neota", "Comanche", "Cache"]}
CATEGORICAL_FEATURE_NAMES = list(VOCABULARY)
FEATURE_NAMES = NUMERIC_FEATURE_NAMES + CATEGORICAL_FEATURE_NAMES
TARGET = "Cover_Type"
CSV_HEADER = FEATURE_NAMES + [TARGET]
NUM_CLASSES = 7
HIDDEN_UNITS = [32, 32]
DROPOUT_RATE = 0.1


def write_covertype(path: str, n: int, seed: int = 11):
    """A CSV of Covertype's schema (standardized numbers); the class is planted in soil, area and
    elevation."""
    rng = np.random.default_rng(seed)
    data = {name: rng.normal(size=n).astype("float32") for name in NUMERIC_FEATURE_NAMES}
    soil, area = rng.integers(0, 40, n), rng.integers(0, 4, n)
    data["Soil_Type"] = np.array(VOCABULARY["Soil_Type"])[soil]
    data["Wilderness_Area"] = np.array(VOCABULARY["Wilderness_Area"])[area]
    logits = rng.normal(size=(40, NUM_CLASSES))[soil] + rng.normal(size=(4, NUM_CLASSES))[area]
    logits[:, 0] += 2 * data["Elevation"]
    data[TARGET] = np.argmax(logits + rng.gumbel(size=logits.shape) * 0.5, axis=1)
    pd.DataFrame(data)[CSV_HEADER].to_csv(path, index=False)


def dataset_from_csv(path: str, batch_size: int, shuffle: bool = False):
    defaults = [[0.0] if name in NUMERIC_FEATURE_NAMES else [0] if name == TARGET else ["NA"]
                for name in CSV_HEADER]
    dataset = tf.data.experimental.make_csv_dataset(
        path, batch_size=batch_size, column_names=CSV_HEADER, column_defaults=defaults,
        label_name=TARGET, num_epochs=1, header=True, shuffle=shuffle, shuffle_seed=5)
    return dataset.map(lambda features, target: (dict(features), target)).cache()


def create_model_inputs():
    return {name: layers.Input(name=name, shape=(),
                               dtype="float32" if name in NUMERIC_FEATURE_NAMES else "string")
            for name in FEATURE_NAMES}


def encode_inputs(inputs, embedding_class, use_embedding=False):
    encoded = []
    for name, value in inputs.items():
        if name in CATEGORICAL_FEATURE_NAMES:
            vocabulary = VOCABULARY[name]
            lookup = layers.StringLookup(vocabulary=vocabulary, mask_token=None, num_oov_indices=0,
                                         output_mode="int" if use_embedding else "binary")
            if use_embedding:
                embedding = embedding_class(len(vocabulary), int(math.sqrt(len(vocabulary))))
                encoded.append(embedding(lookup(value)))
            else:
                encoded.append(lookup(keras.ops.expand_dims(value, -1)))
        else:
            encoded.append(keras.ops.expand_dims(value, -1))
    return layers.concatenate(encoded)


def deep_tower(x):
    for units in HIDDEN_UNITS:
        x = layers.Dense(units)(x)
        x = layers.BatchNormalization()(x)
        x = layers.ReLU()(x)
        x = layers.Dropout(DROPOUT_RATE)(x)
    return x


def create_wide_and_deep_model(embedding_class):
    inputs = create_model_inputs()
    wide = layers.BatchNormalization()(encode_inputs(inputs, embedding_class))
    deep = deep_tower(encode_inputs(inputs, embedding_class, use_embedding=True))
    outputs = layers.Dense(NUM_CLASSES, activation="softmax")(layers.concatenate([wide, deep]))
    return keras.Model(inputs=inputs, outputs=outputs)


def create_deep_and_cross_model(embedding_class):
    inputs = create_model_inputs()
    x0 = encode_inputs(inputs, embedding_class, use_embedding=True)
    cross = x0
    for _ in HIDDEN_UNITS:
        cross = x0 * layers.Dense(cross.shape[-1])(cross) + cross
    cross = layers.BatchNormalization()(cross)
    deep = deep_tower(x0)
    outputs = layers.Dense(NUM_CLASSES, activation="softmax")(layers.concatenate([cross, deep]))
    return keras.Model(inputs=inputs, outputs=outputs)


def run(strategy, embedding_class, workdir: str, model_name="deep_cross", num_examples=20_000,
        epochs=3, batch_size=265, learning_rate=0.001, export=None) -> dict:
    """Trains, evaluates and (``export``) exports; returns the numbers a test compares."""
    paths = {split: os.path.join(workdir, f"covertype_{split}.csv") for split in ("train", "test")}
    write_once(paths["train"], lambda path: write_covertype(path, num_examples, seed=11))
    write_once(paths["test"], lambda path: write_covertype(path, 2048, seed=12))
    keras.utils.set_random_seed(1)  # the same initial weights on every worker
    create = {"deep_cross": create_deep_and_cross_model, "wide_deep": create_wide_and_deep_model}
    with strategy.scope():
        model = create[model_name](embedding_class)
        model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate),
                      loss=keras.losses.SparseCategoricalCrossentropy(),
                      metrics=[keras.metrics.SparseCategoricalAccuracy()])
    history = model.fit(dataset_from_csv(paths["train"], batch_size, shuffle=True), epochs=epochs,
                        verbose=0)
    _, accuracy = model.evaluate(dataset_from_csv(paths["test"], batch_size), verbose=0)
    probe = pd.read_csv(paths["test"]).head(16)
    features = {name: probe[name].to_numpy() for name in FEATURE_NAMES}
    result = {"loss": history.history["loss"], "test_accuracy": float(accuracy),
              "probe": {name: value.tolist() for name, value in features.items()},
              # This worker's own weights (what the chief exports), and the job's predict.
              "predictions": np.asarray(model(features, training=False)).tolist(),
              "job_predictions": model.predict(features, verbose=0).tolist(),
              "tables": sorted(type(getattr(layer, "table", None)).__name__ for layer in model.layers
                               if isinstance(layer, (keras.layers.Embedding,
                                                     tfx_dist.layers.ShardedEmbedding)))}
    if export:
        tfx_dist.serving.export_for_serving(model, export)
    return result


if __name__ == "__main__":
    args = parse_args(__doc__, "/tmp/wide_deep_cross", model="deep_cross", examples=20_000, epochs=3)
    strategy = make_strategy(args.strategy, args.min_shard_bytes)
    result = run(strategy, LAYERS[args.layer], args.workdir, args.model, num_examples=args.examples,
                 epochs=args.epochs, export=args.export)
    print(json.dumps({k: result[k] for k in ("loss", "test_accuracy", "tables")}))
