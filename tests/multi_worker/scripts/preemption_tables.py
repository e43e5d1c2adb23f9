"""Worker script, run under tfx-dist-run: a Keras fit of a model with a ShardedEmbedding table (rows
sharded over the workers under HybridStrategy, on the servers under ParameterServerStrategy: STRATEGY
= hybrid | ps) and tfx_dist.BackupAndRestore saving every 3 steps.

STOP="<who>:<step>[:KILL],...": unless SHARED/stopped-<step> exists, after global step <step> rank 0
(or rank <who>) creates it and sends SIGTERM (or SIGKILL) to: itself for <who> a rank; the launcher
for "launcher" (which forwards it to every process, the servers included); every parameter server
alone for "ps" (then every worker reports how long after that send its own notice came).
Rank 0 reports the step this run started from, every row of the table and the dense weights.
"""
import os
import signal
import time

import keras
import numpy as np

import tfx_dist
from worker_lib import rank, report, weights_digest

SHARED = os.environ["SHARED"]
ROWS = 40
STOPS = [s.split(":") for s in os.environ.get("STOP", "").split(",") if s]
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


def servers_of_the_launcher():
    """The pids of the parameter servers started by the launcher (this worker's parent)."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if parent == os.getppid() and b'"type": "ps"' in environ:
            pids.append(int(entry))
    return pids


class Progress(keras.callbacks.Callback):
    start_step = None

    def on_epoch_begin(self, epoch, logs=None):
        if Progress.start_step is None:
            Progress.start_step = int(model.optimizer.iterations.numpy())

    def on_train_batch_end(self, batch, logs=None):
        step = int(model.optimizer.iterations.numpy())
        for stop in STOPS:
            who, at, sig = (stop + ["TERM"])[:3]
            marker = os.path.join(SHARED, f"stopped-{at}")
            if int(at) != step or rank() != (int(who) if who.isdigit() else 0) or os.path.exists(marker):
                continue
            open(marker, "w").close()
            if who == "ps":
                with open(os.path.join(SHARED, "ps-term-sent"), "w") as f:
                    f.write(repr(time.monotonic()))
                for pid in servers_of_the_launcher():
                    os.kill(pid, signal.SIGTERM)
            else:
                os.kill(os.getppid() if who == "launcher" else os.getpid(), getattr(signal, "SIG" + sig))


backup = tfx_dist.BackupAndRestore(os.path.join(SHARED, "ckpt"), save_freq=3, delete_checkpoint=False)
try:
    model.fit(ids, labels, batch_size=24, epochs=3, shuffle=False, verbose=0,
              callbacks=[Progress(), backup])
except SystemExit:
    sent = os.path.join(SHARED, "ps-term-sent")
    if os.path.exists(sent) and backup._notice.received_at is not None:
        with open(sent) as f:
            report({"rank": rank(), "notice_after_s": backup._notice.received_at - float(f.read())})
    raise
rows = model.get_layer("item_table")(np.arange(ROWS)[:, None].repeat(2, axis=1)).numpy()  # every rank
if rank() == 0:
    report({"start_step": Progress.start_step, "rows": rows.tolist(), "weights": weights_digest(model)})
