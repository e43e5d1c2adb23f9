"""The worker of benchmarks/fault_tolerance.py: a Keras fit of the seeds' model that logs timestamps.

Run by the driver under ``tfx-dist-run``; it changes nothing in how the job
runs, it only appends one JSON line per event to ``$FT_EVENTS/<pid>.jsonl``:
``exec`` (the process's start, from /proc), ``top`` (this script's first
line), ``tf`` (TensorFlow, Keras and tfx_dist imported), ``strategy`` (the
strategy made: for tfx_dist's the rendezvous), ``built`` (model compiled),
``restore_begin``/``restore_end`` (the backup callback's ``on_train_begin``:
where it restores), ``step`` (each trained step: the optimizer's iteration
moved; a batch a resume drops is not one), ``signal`` (just before this
process signals itself), ``saved`` (a checkpoint cost measurement), ``end``.

FT_MODE: ``tfx`` (tfx_dist.MultiWorkerMirroredStrategy + StepCheckpoint),
``keras`` (tf.distribute.MirroredStrategy on 2 logical CPUs in one process +
keras.callbacks.BackupAndRestore), ``none`` (the same, no backup), ``cost``
(tfx_dist.HybridStrategy: the seeds' model and a sharded table, timed saves).
FT_STOP="<rank>:<step>:<KILL|TERM>": that rank signals itself after the
optimizer's step <step>, once per job (a marker file in FT_EVENTS).
"""

import json
import os
import signal
import sys
import time

T_TOP = time.time()
EVENTS = os.environ["FT_EVENTS"]
RANK = json.loads(os.environ.get("TF_CONFIG", '{"task": {"index": 0}}'))["task"]["index"]
RESTART = int(os.environ.get("TFX_RESTART_COUNT", "0"))
MODE = os.environ["FT_MODE"]


def _exec_time() -> float:
    """When the kernel started this process (10 ms resolution)."""
    with open("/proc/stat") as f:
        boot = next(float(line.split()[1]) for line in f if line.startswith("btime"))
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def emit(event: str, t: float | None = None, **fields) -> None:
    line = json.dumps(dict(event=event, t=time.time() if t is None else t, rank=RANK, restart=RESTART,
                           pid=os.getpid(), **fields))
    with open(os.path.join(EVENTS, f"{os.getpid()}.jsonl"), "a") as f:
        f.write(line + "\n")


emit("exec", _exec_time())
emit("top", T_TOP)

if MODE in ("keras", "none"):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
else:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
import keras  # noqa: E402
import numpy as np  # noqa: E402

import tfx_dist  # noqa: E402
from tfx_dist.fault_tolerance import AsyncStepCheckpoint, StepCheckpoint  # noqa: E402

emit("tf")

STEPS_PER_EPOCH = int(os.environ.get("FT_STEPS_PER_EPOCH", "100"))
EPOCHS = int(os.environ.get("FT_EPOCHS", "3"))
SAVE_FREQ = int(os.environ.get("FT_SAVE_FREQ", "20"))
GLOBAL_BATCH = 128
CKPT = os.environ.get("FT_CKPT", os.path.join(EVENTS, "ckpt"))
IDS_PER_EXAMPLE = 64


def seeds_model():
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dropout(0.2), keras.layers.Dense(128, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy")
    return model


def timed(cls):
    """The callback class, with its on_train_begin (where it restores) timed."""
    class Timed(cls):
        def on_train_begin(self, logs=None):
            emit("restore_begin")
            super().on_train_begin(logs)
            emit("restore_end")
    return Timed


class Recorder(keras.callbacks.Callback):
    """Logs every trained step; signals this process at FT_STOP's step."""

    def __init__(self):
        super().__init__()
        self.stop = None
        spec = os.environ.get("FT_STOP", "")
        if spec:
            rank, step, sig = spec.split(":")
            if int(rank) == RANK:
                self.stop = (int(step), getattr(signal, "SIG" + sig))

    def on_train_begin(self, logs=None):
        self.last = None  # read at the first batch: the backup callback has restored by then

    def on_train_batch_begin(self, batch, logs=None):
        if self.last is None:
            self.last = int(self.model.optimizer.iterations.numpy())
            emit("fit_begin", it=self.last)

    def on_train_batch_end(self, batch, logs=None):
        it = int(self.model.optimizer.iterations.numpy())
        if it == self.last:
            return  # a batch the resume dropped
        self.last = it
        emit("step", it=it)
        marker = os.path.join(EVENTS, "signalled")
        if self.stop and it == self.stop[0] and not os.path.exists(marker):
            open(marker, "w").close()
            emit("signal", it=it, sig=int(self.stop[1]))
            os.kill(os.getpid(), self.stop[1])


def data(steps: int):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(GLOBAL_BATCH * steps, 784)).astype("float32")
    y = rng.integers(0, 10, size=(GLOBAL_BATCH * steps,))
    return x, y


def fit_job() -> None:
    if MODE == "tfx":
        strategy = tfx_dist.MultiWorkerMirroredStrategy()
    else:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    emit("strategy")
    keras.utils.set_random_seed(7)
    with strategy.scope():
        model = seeds_model()
    emit("built")
    x, y = data(STEPS_PER_EPOCH)
    callbacks = {"tfx": lambda: [timed(StepCheckpoint)(CKPT, save_freq=SAVE_FREQ)],
                 "keras": lambda: [timed(keras.callbacks.BackupAndRestore)(
                     CKPT, save_freq=SAVE_FREQ, delete_checkpoint=False)],
                 "none": lambda: [timed(keras.callbacks.Callback)()]}[MODE]()
    # The recorder first: it logs a step before a stop at that step ends the process.
    model.fit(x, y, batch_size=GLOBAL_BATCH, epochs=EPOCHS, shuffle=False, verbose=0,
              callbacks=[Recorder()] + callbacks)


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def cost_job() -> None:
    """Step-level saves (StepCheckpoint's own save: every worker's part, fsync, manifest, rename)."""
    rows, dim = int(os.environ.get("FT_TABLE_ROWS", "10000000")), int(os.environ.get("FT_TABLE_DIM", "16"))
    repeats = int(os.environ.get("FT_REPEATS", "3"))
    strategy = tfx_dist.HybridStrategy()
    emit("strategy")
    keras.utils.set_random_seed(7)
    with strategy.scope():
        dense = seeds_model()
        ids = keras.Input((IDS_PER_EXAMPLE,), dtype="int64")
        table = tfx_dist.layers.ShardedEmbedding(rows, dim, combiner="mean", placement="sharded")(ids)
        out = keras.layers.Dense(1, activation="sigmoid")(keras.layers.Dense(16, activation="relu")(table))
        sparse = keras.Model(ids, out)
        sparse.compile(keras.optimizers.Adagrad(0.05), "binary_crossentropy")
    x, y = data(4)
    # A table's rows exist once trained (the store keeps trained rows): one epoch over every id, in
    # about 20 steps, fills all of them (and their slot).
    rng = np.random.default_rng(1)
    examples = -(-rows // IDS_PER_EXAMPLE)
    batch = 2 * -(-examples // 40)
    table_ids = np.resize(rng.permutation(rows), (-(-examples // batch) * batch, IDS_PER_EXAMPLE))
    table_y = rng.integers(0, 2, size=(len(table_ids), 1)).astype("float32")
    for name, model, inputs, labels, batch_size in (("seeds_model", dense, x, y, GLOBAL_BATCH),
                                                    ("table", sparse, table_ids, table_y, batch)):
        callback = StepCheckpoint(os.path.join(CKPT, name), save_freq=1 << 30, preemption=False)
        start = time.perf_counter()
        model.fit(inputs, labels, batch_size=batch_size, epochs=1, shuffle=False, verbose=0,
                  callbacks=[callback])
        emit("filled", what=name, seconds=time.perf_counter() - start)
        for k in range(repeats):
            callback._step += 1  # a new step for each save (the callback's state after fit)
            start = time.perf_counter()
            callback._save(1, 0)
            seconds = time.perf_counter() - start
            latest = callback._directory.latest()
            emit("saved", what=name, seconds=seconds, bytes=folder_bytes(latest.path), rows=rows, dim=dim)
        start = time.perf_counter()
        callback._restore(callback._directory.latest())
        emit("restored", what=name, seconds=time.perf_counter() - start)
    # The same saves of the seeds' model, asynchronous: the step waits for the copy to host memory;
    # the write, fsync, manifest and rename run on the chief's background thread.
    callback = AsyncStepCheckpoint(os.path.join(CKPT, "async"), save_freq=1 << 30, preemption=False)
    dense.fit(x, y, batch_size=GLOBAL_BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    callback.on_train_begin()  # fit's end closed it: open it again to save outside fit
    for k in range(repeats):
        callback._step += 1
        start = time.perf_counter()
        callback._save(1, 0)
        blocking = time.perf_counter() - start
        callback.wait_for_write()
        if RANK == 0:  # the chief writes alone
            emit("saved_async", what="seeds_model", seconds=blocking, committed=time.perf_counter() - start,
                 bytes=folder_bytes(callback._directory.latest().path))


if __name__ == "__main__":
    cost_job() if MODE == "cost" else fit_job()
    emit("end")
    sys.stdout.flush()
