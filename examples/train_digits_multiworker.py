"""Trains a small Keras classifier on scikit-learn's digits with several workers.

Run it under the launcher, which starts the workers and gives each its
TF_CONFIG:

    tfx-dist-run -n 2 python examples/train_digits_multiworker.py

The program is the ordinary single-process Keras program with one change:
``tfx_dist.MultiWorkerMirroredStrategy()`` in place of
``tf.distribute.MultiWorkerMirroredStrategy()``. Each worker reads its own
half of every global batch; gradients are averaged across the workers each
step, so every worker ends with the same weights. The chief (rank 0) prints the
final metrics on the held-out split.
"""

import argparse

import keras
import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import tfx_dist


def load_data():
    """The 1,797 8x8 digits shipped with scikit-learn (no download), scaled to [0, 1]."""
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    is_chief = strategy.extended.should_checkpoint  # rank 0 (TensorFlow's spelling)
    x_train, x_test, y_train, y_test = load_data()
    batch_size = 64 * strategy.num_replicas_in_sync  # the global batch

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build_model()
    model.fit(x_train, y_train, batch_size=batch_size, epochs=args.epochs,
              validation_data=(x_test, y_test), verbose=2 if is_chief else 0)
    loss, accuracy = model.evaluate(x_test, y_test, batch_size=batch_size, verbose=0)
    if is_chief:
        print(f"workers={strategy.extended._num_workers} "  # noqa: SLF001
              f"replicas={strategy.num_replicas_in_sync} batch_size={batch_size} "
              f"test_loss={loss:.4f} test_accuracy={accuracy:.4f}")
        print(f"final test accuracy: {accuracy:.4f}")
    # Every worker holds the same weights: show a checksum to compare.
    print(f"weights checksum: {sum(float(np.sum(w)) for w in model.get_weights()):.6f}")


if __name__ == "__main__":
    main()
