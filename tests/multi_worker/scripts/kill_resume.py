"""Worker script, run under tfx-dist-run: a 2-worker Keras fit with
tfx_dist.BackupAndRestore (a backup at every epoch end), deterministic input
order (shuffle=False, fixed seeds).

KILL_AT="EPOCH,BATCH": unless SHARED/killed exists, rank 1 creates it and
SIGKILLs itself at that batch, mid-epoch; the launcher then kills the job.
The same command run again resumes from the backup. Rank 0 reports the
epochs this run trained and the final weights.
"""
import os
import signal

import keras

from tfx_dist.checkpointing import BackupAndRestore
from worker_lib import make_strategy, rank, regression_data, report, weights_digest

SHARED = os.environ["SHARED"]
EPOCHS = 3
strategy = make_strategy()
x, y = regression_data(n=128)
keras.utils.set_random_seed(7)  # the same initial weights in every run
with strategy.scope():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8, activation="relu"),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.02, momentum=0.9), "mse")


class KillMidEpoch(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        spec = os.environ.get("KILL_AT")
        self.at = tuple(int(v) for v in spec.split(",")) if spec else None
        self.epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        marker = os.path.join(SHARED, "killed")
        if self.at == (self.epoch, batch) and rank() == 1 and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)


class Epochs(keras.callbacks.Callback):
    trained = []

    def on_epoch_end(self, epoch, logs=None):
        self.trained.append(epoch)


model.fit(x, y, batch_size=16, epochs=EPOCHS, shuffle=False, verbose=0,
          callbacks=[BackupAndRestore(os.path.join(SHARED, "backup")), KillMidEpoch(), Epochs()])
if rank() == 0:
    report({"epochs_trained": Epochs.trained, "weights": weights_digest(model)})
