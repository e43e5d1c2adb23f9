"""The seeds' Keras program on one machine, with a tfx_dist strategy.

The only line that differs from a plain tf.distribute program is the one that
builds the strategy. The data is scikit-learn's 8x8 digits (no download), so
the model's input is 64 features instead of MNIST's 784.

    python examples/train_digits.py                     # MirroredStrategy, 4 devices
    python examples/train_digits.py --strategy central  # CentralStorageStrategy

Without a GPU, the CPU is split into --devices logical devices so that the
strategy has several replicas.
"""

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["mirrored", "central"], default="mirrored")
    parser.add_argument("--devices", type=int, default=4,
                        help="logical CPU devices to make when there is no GPU")
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()

    if not tf.config.list_physical_devices("GPU"):
        tf.config.set_logical_device_configuration(
            tf.config.list_physical_devices("CPU")[0],
            [tf.config.LogicalDeviceConfiguration()] * args.devices)
    devices = [d.name for d in tf.config.list_logical_devices("GPU")] or \
        [d.name for d in tf.config.list_logical_devices("CPU")]

    import keras
    from digits import build_model, load_data

    import tfx_dist

    keras.utils.set_random_seed(0)
    x_train, x_test, y_train, y_test = load_data()

    if args.strategy == "mirrored":
        strategy = tfx_dist.MirroredStrategy(devices)  # was: tf.distribute.MirroredStrategy()
    else:
        strategy = tfx_dist.CentralStorageStrategy(devices)
    print(f"{type(strategy).__name__} with {strategy.num_replicas_in_sync} replicas")

    batch_size = 64 * strategy.num_replicas_in_sync
    train = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(
        len(x_train), seed=0).batch(batch_size)
    test = tf.data.Dataset.from_tensor_slices((x_test, y_test)).batch(batch_size)

    with strategy.scope():
        model = build_model()

    model.fit(train, validation_data=test, epochs=args.epochs, verbose=2)
    loss, accuracy = model.evaluate(test, verbose=0)
    predictions = np.argmax(model.predict(test, verbose=0), axis=1)
    print(f"held-out loss {loss:.4f}, accuracy {accuracy:.4f} "
          f"(predict agrees: {np.mean(predictions == y_test):.4f})")


if __name__ == "__main__":
    main()
