"""One rank of the memory-growth test (test_collective_memory.py).

Usage: python memory_worker.py SCENARIO RANK ADDRESSES_JSON "CALLS,TENSORS"

SCENARIO ``numpy``: ``allreduce_numpy`` of TENSORS arrays with default names
(a new name per call); ``eager``: eager ``ops.all_reduce`` of TENSORS tensors
(default names); ``eager_named``: the same with a caller's name unique per
call (``step<i>``). Each warms up for CALLS/5 calls, then measures resident
memory and open file descriptors over CALLS more calls. Prints
"RESULT <json>".
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tfx_dist.comm import Communicator  # noqa: E402


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def main():
    scenario, rank, addresses = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    calls, tensors = (int(v) for v in sys.argv[4].split(","))
    if scenario == "fit":
        return fit(rank, addresses, calls)
    comm = Communicator(rank, len(addresses), addresses, timeout_s=60)
    if scenario == "numpy":
        arrays = [np.full(4, rank + 1, np.float32) for _ in range(tensors)]

        def call(i):
            out = comm.allreduce_numpy(arrays)
            assert out[-1][0] == 3.0, out[-1]
    else:
        import tensorflow as tf

        from tfx_dist.comm import ops
        values = [tf.fill([4], float(rank + 1)) for _ in range(tensors)]

        def call(i):
            name = f"step{i}" if scenario == "eager_named" else None
            out = ops.all_reduce(values, comm, name=name)
            assert float(out[-1][0]) == 3.0, out[-1]

    warm = max(1, calls // 5)
    for i in range(warm):
        call(i)
    rss0, fds0, t0 = rss_mb(), open_fds(), time.perf_counter()
    for i in range(warm, warm + calls):
        call(i)
    elapsed = time.perf_counter() - t0
    # Every collective has completed here, on every rank: nothing may be held.
    held = comm.stats()["names_held"]
    result = {"rss_warm_mb": rss0, "rss_end_mb": rss_mb(), "fds_warm": fds0, "fds_end": open_fds(),
              "names_held": held, "ms_per_call": 1000 * elapsed / calls}
    comm.close()
    print("RESULT " + json.dumps(result), flush=True)


def fit(rank, addresses, steps):
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": addresses},
                                          "task": {"type": "worker", "index": rank}})
    import keras

    from tfx_dist.strategies.multi_worker_mirrored import MultiWorkerMirroredStrategy

    steps_per_epoch, batch = 50, 8
    warm_epochs = max(1, steps // 5 // steps_per_epoch)
    epochs = steps // steps_per_epoch
    strategy = MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps_per_epoch * batch, 8)).astype("float32")
    y = x.sum(axis=1, keepdims=True)
    with strategy.scope():
        model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                                  keras.layers.Dense(1)])
        model.compile(keras.optimizers.SGD(0.01), "mse")
    marks = {}

    class Measure(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == warm_epochs:
                marks.update(rss_warm_mb=rss_mb(), fds_warm=open_fds(), t0=time.perf_counter())

    model.fit(x, y, batch_size=batch, epochs=warm_epochs + epochs, shuffle=False, verbose=0,
              callbacks=[Measure()])
    elapsed = time.perf_counter() - marks["t0"]
    held = strategy.extended._transport.communicator.stats()["names_held"]
    result = {"rss_warm_mb": marks["rss_warm_mb"], "rss_end_mb": rss_mb(), "fds_warm": marks["fds_warm"],
              "fds_end": open_fds(), "names_held": held, "ms_per_call": 1000 * elapsed / steps,
              "steps": steps, "epochs": epochs}
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
