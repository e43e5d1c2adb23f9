"""The Horovod Keras script that horovod_fit.py times, on real Horovod and on tfx_dist.horovod.

A typical Horovod Keras script: an MLP on synthetic MNIST-like data (784
features, 10 classes), each rank on its own shard, learning rate scaled by the
number of ranks with a warmup, `DistributedOptimizer`, the broadcast and
metric-average callbacks. The one line that differs between the two systems is
the import (``FIT_BENCH_IMPL=horovod``: ``horovod.tensorflow.keras``, in the
virtual environment benchmarks/setup_horovod.sh builds, TensorFlow 2.12 and
Keras 2; anything else: ``tfx_dist.horovod.keras``, TensorFlow 2.21 and
Keras 3). The rest runs unchanged on both Kerases.

``FIT_BENCH_IMPL=none`` is the machine's ceiling: no Horovod and no
communication at all; ``FIT_BENCH_RANK`` / ``FIT_BENCH_SIZE`` give the process its
shard and learning rate as a rank would have, ``DistributedOptimizer`` is the
plain optimizer and the Horovod callbacks are left out. Started as
FIT_BENCH_SIZE independent processes at once (each bound to its rank's CPUs),
it shows what this machine does with no cross-process work; in either
environment, it separates TensorFlow's own speed from communication.

Rank 0 prints ``RESULT {...}``: examples per second (all ranks' examples of an
epoch / its wall time; the median over the epochs after the first, which
traces and warms up), every epoch's time, the last loss and the versions.
"""

import json
import os
import statistics
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# Under horovodrun each process binds itself to the CPUs tfx-dist-run would give
# its local rank (tfx-dist-run binds its workers itself), before TensorFlow
# starts threads, so that both systems run on the same CPU shares.
_local = (("HOROVOD_LOCAL_SIZE", "HOROVOD_LOCAL_RANK") if "HOROVOD_LOCAL_SIZE" in os.environ else
          ("FIT_BENCH_SIZE", "FIT_BENCH_RANK") if "FIT_BENCH_SIZE" in os.environ else None)
if _local and os.environ.get("TFX_BENCH_CPU_BIND", "cores") == "cores":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from allreduce_multiprocess import launcher_cpu_shares  # stdlib only at import

    _shares = launcher_cpu_shares(int(os.environ[_local[0]]))
    if _shares:
        os.sched_setaffinity(0, _shares[int(os.environ[_local[1]])])

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if os.environ.get("FIT_BENCH_IMPL") == "horovod":
    import horovod.tensorflow.keras as hvd  # noqa: E402
elif os.environ.get("FIT_BENCH_IMPL") == "none":
    import types  # noqa: E402

    # No communication: the calls the script makes, as a lone rank of its shard.
    hvd = types.SimpleNamespace(
        init=lambda: None, rank=lambda: int(os.environ.get("FIT_BENCH_RANK", "0")),
        size=lambda: int(os.environ.get("FIT_BENCH_SIZE", "1")), DistributedOptimizer=lambda opt: opt)
else:
    import tfx_dist.horovod.keras as hvd  # was: import horovod.tensorflow.keras as hvd  # noqa: E402

EPOCHS = int(os.environ.get("FIT_BENCH_EPOCHS", "4"))
EXAMPLES_PER_RANK = int(os.environ.get("FIT_BENCH_EXAMPLES", "8192"))
BATCH = int(os.environ.get("FIT_BENCH_BATCH", "64"))
HIDDEN = int(os.environ.get("FIT_BENCH_HIDDEN", "512"))

hvd.init()

# Labels from a fixed random linear map of the inputs: learnable, the same on every rank.
teacher = np.random.default_rng(0).normal(size=(784, 10)).astype("float32")
rng = np.random.default_rng(1 + hvd.rank())
x = rng.random((EXAMPLES_PER_RANK, 784), dtype=np.float32)
y = np.argmax(x @ teacher, axis=1).astype("int64")

model = keras.Sequential([
    keras.Input((784,)),
    keras.layers.Dense(HIDDEN, activation="relu"),
    keras.layers.Dense(HIDDEN, activation="relu"),
    keras.layers.Dense(10, activation="softmax"),
])
scaled_lr = 0.001 * hvd.size()
opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])


class EpochTimes(keras.callbacks.Callback):
    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.cpu_start = time.perf_counter(), time.process_time()

    def on_epoch_end(self, epoch, logs=None):
        times.append(time.perf_counter() - self.start)
        # CPU seconds of all this process's threads: what the step costs the
        # machine, which a loaded machine's wall times hide.
        cpu_times.append(time.process_time() - self.cpu_start)


times, cpu_times = [], []
callbacks = [EpochTimes()] if os.environ.get("FIT_BENCH_IMPL") == "none" else [
    hvd.callbacks.BroadcastGlobalVariablesCallback(0),
    hvd.callbacks.MetricAverageCallback(),
    hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=1),
    EpochTimes(),
]
history = model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, callbacks=callbacks, verbose=0)

if hvd.rank() == 0 or os.environ.get("FIT_BENCH_IMPL") == "none":
    # With no communication each process reports its own examples (the benchmark adds them up).
    examples = EXAMPLES_PER_RANK * (1 if os.environ.get("FIT_BENCH_IMPL") == "none" else hvd.size())
    print("RESULT " + json.dumps({
        "examples_per_s": examples / statistics.median(times[1:] or times),
        "epoch_s": times, "epoch_cpu_s": cpu_times,
        "cpu_ms_per_step": 1e3 * statistics.median(cpu_times[1:] or cpu_times) / -(-EXAMPLES_PER_RANK // BATCH),
        "size": hvd.size(), "batch_per_rank": BATCH, "hidden": HIDDEN,
        "params": int(sum(np.prod(v.shape) for v in model.trainable_weights)),
        "loss": [float(v) for v in history.history["loss"]],
        "accuracy": [float(v) for v in history.history["accuracy"]],
        "versions": {"tensorflow": tf.__version__, "keras": keras.__version__,
                     "python": sys.version.split()[0]},
    }), flush=True)
