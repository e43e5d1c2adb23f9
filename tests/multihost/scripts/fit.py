"""Worker script: the seeds' Keras model fitted through tfx_dist.MultiWorkerMirroredStrategy.

Reports (one line ``RESULT <json>``) a digest of the final weights, the
transport to every peer and the fit time. Environment: EPOCHS (default 2),
PROGRESS_FILE (optional: a line is appended after every batch, so that a
test can act mid-training).
"""
import hashlib
import json
import os
import sys
import time

import keras
import numpy as np

import tfx_dist
from local.models import digits, seeds_model  # tests/local: the seeds' model and data

EPOCHS = int(os.environ.get("EPOCHS", "2"))
PROGRESS = os.environ.get("PROGRESS_FILE")


def error(e: BaseException, start: float) -> None:
    print("ERROR " + json.dumps({"rank": os.environ.get("RANK"), "type": type(e).__name__,
                                 "message": str(e)[:3000],
                                 "elapsed_s": time.monotonic() - start}), flush=True)
    os._exit(3)  # do not wait for TensorFlow's threads


class Progress(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if PROGRESS:
            with open(PROGRESS, "a") as f:
                f.write(f"{os.environ.get('RANK')} {batch}\n")


def main(start: float) -> None:
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    info = strategy.cluster_info
    (x, y), _ = digits()
    keras.utils.set_random_seed(1234 + info.rank)  # the chief's initial values must win
    with strategy.scope():
        model = seeds_model()
    fit_start = time.monotonic()
    history = model.fit(x, y, batch_size=64 * strategy.num_replicas_in_sync, epochs=EPOCHS,
                        shuffle=False, verbose=0, callbacks=[Progress()])
    fit_s = time.monotonic() - fit_start
    comm = strategy.extended._transport.communicator  # the tfx_dist.comm.Communicator
    weights = np.concatenate([np.asarray(w, np.float32).ravel() for w in model.get_weights()])
    result = json.dumps({
        "rank": info.rank,
        "digest": hashlib.sha256(weights.tobytes()).hexdigest(),
        "transports": [comm.transport(p) for p in range(info.num_workers)],
        "loss": history.history["loss"],
        "fit_s": fit_s,
    })
    # One write, newline included: unbuffered, print() writes the text and its newline apart, and
    # mpirun, merging the ranks' output, can put the other rank's line between them.
    sys.stdout.write(f"RESULT {result}\n")
    sys.stdout.flush()


if __name__ == "__main__":
    t0 = time.monotonic()
    try:
        main(t0)
    except Exception as e:  # noqa: BLE001  (reported to the test)
        error(e, t0)
    if "mpi4py.MPI" in sys.modules:   # under mpirun: it wants every rank to finalize
        sys.modules["mpi4py.MPI"].Finalize()
    os._exit(0)
