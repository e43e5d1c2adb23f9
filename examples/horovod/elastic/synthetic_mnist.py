"""Stands in for ``tf.keras.datasets.mnist.load_data`` (no internet here): arrays of MNIST's shapes
and dtypes whose label is learnable (the brightest of ten horizontal bands of the image)."""

import numpy as np


def load_data(path=None, num_train=60000, num_test=10000, seed=0):
    rng = np.random.default_rng(seed)

    def part(n):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = rng.integers(0, 100, (n, 28, 28)).astype(np.uint8)
        rows = np.arange(28) * 10 // 28  # the band of each row
        images[(rows[None, :] == labels[:, None])] += 120  # the label's band is brighter
        return images, labels

    return part(num_train), part(num_test)
