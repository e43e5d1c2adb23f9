"""Worker script, run under tfx-dist-run: a Keras fit of a model with a ShardedEmbedding table (rows
sharded over the workers under HybridStrategy, on the servers under ParameterServerStrategy: STRATEGY
= hybrid | ps) and tfx_dist.BackupAndRestore saving every 3 steps. STOP="<rank>:<step>": unless
SHARED/stopped exists, that rank creates it and sends itself SIGTERM after global step <step>;
STOP="launcher:<step>": rank 0 sends SIGTERM to the launcher (which forwards it to every process,
the servers included).
Rank 0 reports the step this run started from, every row of the table and the dense weights.
"""
import os
import signal

import keras
import numpy as np

import tfx_dist
from worker_lib import rank, report, weights_digest

SHARED = os.environ["SHARED"]
ROWS = 40
strategy = (tfx_dist.HybridStrategy() if os.environ["STRATEGY"] == "hybrid"
            else tfx_dist.ParameterServerStrategy())
rs = np.random.RandomState(0)
ids = rs.randint(0, ROWS, (96, 2)).astype("int64")
labels = ((ids[:, :1] % 3) == 0).astype("float32")
keras.utils.set_random_seed(7)
with strategy.scope():
    inputs = keras.Input((2,), dtype="int64")
    table = tfx_dist.layers.ShardedEmbedding(ROWS, 4, combiner="mean", placement="sharded",
                                             name="item_table")
    hidden = keras.layers.Dense(8, activation="tanh")(table(inputs))
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))
    model.compile(keras.optimizers.Adagrad(0.3), "binary_crossentropy")
stop = os.environ.get("STOP")


class Progress(keras.callbacks.Callback):
    start_step = None

    def on_epoch_begin(self, epoch, logs=None):
        if Progress.start_step is None:
            Progress.start_step = int(model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        marker = os.path.join(SHARED, "stopped")
        step = int(model.optimizer.iterations.numpy())
        who, at = stop.split(":") if stop else (None, None)
        if at and int(at) == step and rank() == (0 if who == "launcher" else int(who)) \
                and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getppid() if who == "launcher" else os.getpid(), signal.SIGTERM)


backup = tfx_dist.BackupAndRestore(os.path.join(SHARED, "ckpt"), save_freq=3, delete_checkpoint=False)
model.fit(ids, labels, batch_size=24, epochs=3, shuffle=False, verbose=0, callbacks=[Progress(), backup])
rows = model.get_layer("item_table")(np.arange(ROWS)[:, None].repeat(2, axis=1)).numpy()  # every rank
if rank() == 0:
    report({"start_step": Progress.start_step, "rows": rows.tolist(), "weights": weights_digest(model)})
