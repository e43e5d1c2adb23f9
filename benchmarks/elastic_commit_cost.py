"""The cost of an elastic commit per step: `model.fit` step time with `CommitStateCallback` every 1,
10 and 100 steps, against no commit.

A 2-worker job under `tfx-dist-run --elastic --min-workers 2 --max-workers 2` (so each commit also
asks the ranks whether the driver announced a change: one small all-reduce), on
`tfx_dist.MultiWorkerMirroredStrategy`, the seeds' model (Dense 784->256 relu, Dropout 0.2,
Dense 128 relu, Dense 10; Adam: 235k weights, 3 copies with the slots), 64 examples per worker
and step, one TensorFlow thread per worker. A commit copies every variable of the model and the
optimizer into host memory (`KerasState`) and checks for a change. The intervals take turns,
in rounds (the machine is shared: its load drifts), each one `fit` of --steps steps, timed by
rank 0 from the end of the 10th step to the end of the last. Then `state.save()` alone, beside
reading the variables one by one (as a commit did before it read them in one function call).
Prints one JSON line.

    python benchmarks/elastic_commit_cost.py --rounds 3 --steps 200
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
RESULT = "COMMIT_COST "
INTERVALS = (None, 100, 10, 1)  # None: no commit


def worker(rounds: int, steps: int) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    import tfx_dist
    from tfx_dist.elastic import CommitStateCallback, KerasState, membership

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    with strategy.scope():
        keras.utils.set_random_seed(0)
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dropout(0.2), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10)])
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        model.optimizer.build(model.trainable_variables)
    state = KerasState(model)
    state.sync()
    rng = np.random.default_rng(membership.generation().rank)
    x = rng.normal(size=(64 * steps, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64 * steps)

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 9:
                self.start = time.perf_counter()
            elif batch == steps - 1:
                self.per_step = (time.perf_counter() - self.start) / (steps - 10)

    def dataset(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(64)

    times = {str(k): [] for k in INTERVALS}
    model.fit(strategy.distribute_datasets_from_function(dataset), steps_per_epoch=20, verbose=0)  # warm
    for _ in range(rounds):
        for interval in INTERVALS:
            clock = Clock()
            callbacks = [clock] + ([CommitStateCallback(state, interval)] if interval else [])
            model.fit(strategy.distribute_datasets_from_function(dataset), steps_per_epoch=steps, verbose=0,
                      callbacks=callbacks)
            times[str(interval)].append(clock.per_step)
    variables = state._variables()

    def one_by_one():  # how a commit read the variables before: one read (one dispatch) each
        return [np.array(v.numpy(), copy=True) for v in variables]

    copies = {}
    for name, copy in (("save_s", state.save), ("read_one_by_one_s", one_by_one)) * 2:
        started = time.perf_counter()
        for _ in range(20):
            copy()
        copies[name] = (time.perf_counter() - started) / 20  # the second (warm) pass counts
    if membership.generation().rank == 0:
        weights = sum(int(np.prod(v.shape)) for v in variables)
        print(RESULT + json.dumps({"step_s": times, **copies, "variables_elements": weights}), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.rounds, args.steps)
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    load_before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tfx_dist.run", "--elastic", "--min-workers", "2",
                           "--max-workers", "2", sys.executable, os.path.abspath(__file__), "--worker",
                           "--rounds", str(args.rounds), "--steps", str(args.steps)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=3000)
    lines = [line for line in proc.stdout.splitlines() if RESULT in line]
    if proc.returncode != 0 or not lines:
        print(proc.stdout[-3000:] + proc.stderr[-3000:], file=sys.stderr)
        sys.exit(1)
    result = json.loads(lines[-1].split(RESULT, 1)[1])
    medians = {k: statistics.median(v) for k, v in result["step_s"].items()}
    none = medians["None"]
    result.update({
        "median_step_ms": {k: round(v * 1e3, 3) for k, v in medians.items()},
        "commit_cost_per_step_ms": {k: round((v - none) * 1e3, 3) for k, v in medians.items() if k != "None"},
        "load_average_before": load_before, "load_average_after": os.getloadavg(), "cpus": os.cpu_count(),
        "wall_s": round(time.monotonic() - started, 1)})
    print(json.dumps(result))


if __name__ == "__main__":
    main()
