"""The seeds' Keras program and data shared by the single-process strategy tests."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits

CPUS = [f"/cpu:{i}" for i in range(4)]


def digits(n_train: int = 1400):
    """sklearn's digits (no download): features scaled to [0, 1], int labels."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    y = y.astype("int32")
    return (x[:n_train], y[:n_train]), (x[n_train:], y[n_train:])


def seeds_model(num_features: int = 64, dropout: float = 0.2) -> keras.Model:
    """The seeds' model, input size adapted to the data (784 for MNIST there)."""
    model = keras.Sequential([
        keras.Input((num_features,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(dropout),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def batched(x, y, global_batch: int, shuffle: bool = True) -> tf.data.Dataset:
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    if shuffle:
        ds = ds.shuffle(len(x), seed=0)
    return ds.batch(global_batch)


def graph_op_types(fn, *args) -> set[str]:
    """The op types of the graph of tf.function `fn` traced on `args`, nested functions included."""
    graph = fn.get_concrete_function(*args).graph
    types = {op.type for op in graph.get_operations()}
    for function in graph._functions.values():  # pylint: disable=protected-access
        types.update(node.op for node in function.cached_definition.node_def)
    return types


def max_abs_diff(a_list, b_list) -> float:
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in zip(a_list, b_list))
