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

With ``--checkpoint-dir`` (default: ``TFX_CHECKPOINT_DIR``, which
``tfx-dist-run --checkpoint-dir`` sets) a job that is restarted after a
failure resumes at the last epoch backed up there (see docs/clusters.md).
"""

import argparse
import os

import keras
import numpy as np
from digits import build_model, load_data  # the same data and model as train_digits.py

import tfx_dist


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--checkpoint-dir", default=os.environ.get("TFX_CHECKPOINT_DIR"),
                        help="back up every epoch here and resume from it (storage every worker reads)")
    args = parser.parse_args()

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    is_chief = strategy.extended.should_checkpoint  # rank 0 (TensorFlow's spelling)
    x_train, x_test, y_train, y_test = load_data()
    batch_size = 64 * strategy.num_replicas_in_sync  # the global batch

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = build_model()
    backup = [tfx_dist.BackupAndRestore(args.checkpoint_dir)] if args.checkpoint_dir else []
    model.fit(x_train, y_train, batch_size=batch_size, epochs=args.epochs,
              validation_data=(x_test, y_test), verbose=2 if is_chief else 0, callbacks=backup)
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
