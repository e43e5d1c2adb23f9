"""Trains the seeds' model for one epoch under one strategy and saves its weights.

Run as a script, in its own process: two strategies of TensorFlow's that train
in one process can collide on collective keys (see shared/NOTES.md).

    python reference_train.py STRATEGY OUT.npz
STRATEGY: tfx_mirrored, tf_mirrored, tfx_central or tf_central.
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 4)

import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from local.models import CPUS, batched, digits, seeds_model  # noqa: E402

import tfx_dist  # noqa: E402

STRATEGIES = {
    "tfx_mirrored": lambda: tfx_dist.MirroredStrategy(CPUS),
    "tf_mirrored": lambda: tf.distribute.MirroredStrategy(
        CPUS, cross_device_ops=tf.distribute.ReductionToOneDevice()),
    "tfx_central": lambda: tfx_dist.CentralStorageStrategy(CPUS),
    "tf_central": lambda: tf.distribute.experimental.CentralStorageStrategy(CPUS),
}


def main(name: str, out: str) -> None:
    keras.utils.set_random_seed(0)
    strategy = STRATEGIES[name]()
    (x, y), _ = digits()
    with strategy.scope():
        # TensorFlow's own CentralStorageStrategy cannot train Keras 3 models
        # with Dropout (its seed variable's aggregation is refused), so the
        # central-storage comparison leaves Dropout out.
        model = seeds_model(dropout=0.0 if name.endswith("central") else 0.2)
    history = model.fit(batched(x, y, 64 * strategy.num_replicas_in_sync), epochs=1, verbose=0)
    np.savez(out, loss=np.array(history.history["loss"]),
             **{f"w{i}": w for i, w in enumerate(model.get_weights())})


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
