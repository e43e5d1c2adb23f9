"""The data and model of the digits examples (train_digits.py, train_digits_multiworker.py):
only the strategy differs between them."""

import keras
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def load_data():
    """The 1,797 8x8 digits shipped with scikit-learn (no download), scaled to [0, 1]:
    x_train, x_test, y_train, y_test."""
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    return train_test_split(x, y.astype("int64"), test_size=0.2, random_state=0, stratify=y)


def build_model():
    model = keras.Sequential([
        keras.Input(shape=(64,)),
        keras.layers.Dense(256, activation="relu"),
        keras.layers.Dropout(0.2),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model
