"""The hot paths the fault-tolerance work changed, timed on two checkouts alternately in one run.

    python3 benchmarks/hot_paths_side_by_side.py --before /work/wt/ft-measure-old --after . --rounds 2

Each round runs one 2-worker job (``python -m tfx_dist.run -n 2``, one
TensorFlow thread per worker) from each checkout (before first in odd rounds, after first in even ones), with
that checkout's ``tfx_dist`` and op libraries (``PYTHONPATH``); the worker is
this file. Rank 0 reports:

* ``mean_1``, ``mean_1m``: one MEAN all-reduce of 1 and of 1M float32 in a
  ``tf.function`` through ``strategy.run`` (the runtime's MEAN with a
  negotiated divisor, against a sum and a division before);
* ``embedding_fit``: a step of ``model.fit`` of keras.layers.Embedding(50,000
  x 32, 20 ids per example) + Dense, Adam, global batch 256 (sparse
  gradients concatenated, against merged by id before);
* ``seeds_fit``: a step of ``model.fit`` of the seeds' model, global batch
  128, without a callback; on a checkout that has it also with
  ``StepCheckpoint`` (the per-step agreement: one int32 all-reduce) at
  ``TFX_PREEMPTION_CHECK_STEPS`` 1 and 10 (read when the callback is made).

Medians over the rounds inside each job; the ratios after/before use the
same round's two jobs. The numbers move with the machine's load: compare ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TAG = "HOT_PATHS "
HERE = os.path.dirname(os.path.abspath(__file__))


def _median_step(fit, steps: int, rounds: int) -> float:
    fit()  # warm-up: tracing, connections
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fit()
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def worker(args) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    import tfx_dist

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    report = {}
    for name, size in (("mean_1", 1), ("mean_1m", 1 << 20)):
        value = tf.fill([size], float(rank + 1))

        @tf.function
        def mean(x):
            # strategy.reduce, not a replica context's all_reduce: the old tree refused that in a graph
            return strategy.reduce(tf.distribute.ReduceOp.MEAN, strategy.run(tf.identity, args=(x,)),
                                   axis=None)

        assert abs(float(tf.reshape(mean(value), [-1])[0]) - 1.5) < 1e-6
        calls = args.calls if size == 1 else max(10, args.calls // 10)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls):
                mean(value)
            times.append((time.perf_counter() - start) / calls)
        report[name] = statistics.median(times)

    rng = np.random.default_rng(0)
    steps = args.steps
    ids = rng.integers(0, 50_000, size=(256 * steps, 20))
    labels = rng.normal(size=(256 * steps, 1)).astype("float32")
    keras.utils.set_random_seed(7)
    with strategy.scope():
        emb = keras.Sequential([keras.Input((20,), dtype="int64"), keras.layers.Embedding(50_000, 32),
                                keras.layers.GlobalAveragePooling1D(), keras.layers.Dense(1)])
        emb.compile("adam", "mse")
    report["embedding_fit"] = _median_step(
        lambda: emb.fit(ids, labels, batch_size=256, epochs=1, shuffle=False, verbose=0), steps, args.rounds)

    x = rng.normal(size=(128 * steps, 784)).astype("float32")
    y = rng.integers(0, 10, size=(128 * steps,))
    with strategy.scope():
        seeds = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dropout(0.2), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        seeds.compile("adam", "sparse_categorical_crossentropy")
    try:
        from tfx_dist.fault_tolerance import StepCheckpoint
    except ImportError:
        StepCheckpoint = None
    variants = {"seeds_fit": None}  # name -> TFX_PREEMPTION_CHECK_STEPS with a StepCheckpoint
    if StepCheckpoint is not None:
        variants.update(seeds_fit_check1="1", seeds_fit_check10="10")
    folder = os.path.join(os.environ["BENCH_DIR"], f"ckpt{rank}")

    def fit(check_steps) -> float:
        callbacks = []
        if check_steps is not None:  # the agreement reads the setting when fit starts
            os.environ["TFX_PREEMPTION_CHECK_STEPS"] = check_steps
            callbacks = [StepCheckpoint(folder, save_freq=1 << 30)]
        try:
            start = time.perf_counter()
            seeds.fit(x, y, batch_size=128, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
            return (time.perf_counter() - start) / steps
        finally:
            os.environ.pop("TFX_PREEMPTION_CHECK_STEPS", None)

    times = {name: [] for name in variants}
    for check_steps in variants.values():  # warm-up
        fit(check_steps)
    for _ in range(args.rounds):
        for name, check_steps in variants.items():
            times[name].append(fit(check_steps))
    report.update({name: statistics.median(t) for name, t in times.items()})
    if rank == 0:
        print(TAG + json.dumps(report), flush=True)


def run_job(checkout: str, args, bench_dir: str) -> dict:
    env = dict(os.environ, PYTHONPATH=checkout, TF_CPP_MIN_LOG_LEVEL="2", BENCH_DIR=bench_dir)
    command = [sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", str(int(args.timeout)),
               sys.executable, os.path.abspath(__file__), "--worker", "--steps", str(args.steps),
               "--rounds", str(args.rounds_in_job), "--calls", str(args.calls)]
    load_before = os.getloadavg()[0]
    proc = subprocess.run(command, env=env, cwd=checkout, capture_output=True, text=True,
                          timeout=args.timeout + 60)
    lines = [line.split(TAG, 1)[1] for line in proc.stdout.splitlines() if TAG in line]
    if proc.returncode != 0 or not lines:
        return {"error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-1500:]}"}
    return dict(json.loads(lines[-1]), load=[round(load_before, 1), round(os.getloadavg()[0], 1)])


LABELS = [("mean_1", "MEAN all-reduce, 1 float32 (tf.function)", 1e6, "us"),
          ("mean_1m", "MEAN all-reduce, 1M float32 (tf.function)", 1e3, "ms"),
          ("embedding_fit", "fit step: Embedding 50,000 x 32 + Dense, Adam", 1e3, "ms"),
          ("seeds_fit", "fit step: the seeds' model, no callback", 1e3, "ms"),
          ("seeds_fit_check1", "fit step: the seeds' model + StepCheckpoint (check every step)", 1e3, "ms"),
          ("seeds_fit_check10", "fit step: the seeds' model + StepCheckpoint (check every 10 steps)", 1e3,
           "ms")]


def markdown(rounds: list[dict], before: str, after: str, when: str) -> str:
    from common import table

    header = ["path"]
    for k, r in enumerate(rounds):
        first = r.get("order", ["before"])[0]
        header += [f"round {k + 1} before (load {r['before'].get('load', ['?'])[0]})",
                   f"after (load {r['after'].get('load', ['?'])[0]})", f"after / before ({first} first)"]
    body = []
    for key, label, scale, unit in LABELS:
        row = [label]
        for r in rounds:
            b, a = r["before"].get(key), r["after"].get(key)
            cell = (lambda v: "-" if v is None else f"{v * scale:.3g} {unit}")
            if a is None:
                ratio = "-"
            elif b is not None:
                ratio = f"**{a / b:.2f}**"
            elif key.startswith("seeds_fit_check") and r["after"].get("seeds_fit"):
                ratio = f"**{a / r['after']['seeds_fit']:.2f}** of after's no callback"
            else:
                ratio = "-"
            row += [cell(b), cell(a), ratio]
        body.append(row)
    return "\n".join([
        "## Hot paths of the fault-tolerance change, before and after (2 workers, loopback)", "",
        f"Before: `{before}`; after: `{after}`. One 2-worker job per checkout per round (one TensorFlow "
        "thread per worker), in the order the ratio's header says; medians inside each job. "
        "**Taken under load** (the "
        "load average before each job is in the header): compare the ratios, not the absolute "
        "figures. A StepCheckpoint row has no before (the callback did not exist): its ratio is "
        "against the same job's fit without a callback.", "",
        table(header, body), "",
        f"*Command: `python3 benchmarks/hot_paths_side_by_side.py --before {before} --after {after} "
        f"--rounds {len(rounds)}` (run {when}).*"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--before")
    parser.add_argument("--after", default=".")
    parser.add_argument("--rounds", type=int, default=2, help="jobs per checkout, alternating")
    parser.add_argument("--rounds-in-job", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "hot_paths_side_by_side.md"))
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    import tempfile

    sys.path.insert(0, HERE)
    before, after = os.path.abspath(args.before), os.path.abspath(args.after)
    rounds = []
    with tempfile.TemporaryDirectory() as bench_dir:
        for k in range(args.rounds):
            # Odd rounds run after first: a load that rises or falls during a round favours neither.
            order = ("before", "after") if k % 2 == 0 else ("after", "before")
            checkout = {"before": before, "after": after}
            jobs = {label: run_job(checkout[label], args, bench_dir) for label in order}
            rounds.append(dict(jobs, order=list(order)))
            print(json.dumps(rounds[-1]), flush=True)
    md = markdown(rounds, args.before, args.after, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    with open(args.out, "w") as f:
        f.write(md + "\n")
    with open(os.path.splitext(args.out)[0] + ".json", "w") as f:
        json.dump(rounds, f, indent=1)
    print(md)


if __name__ == "__main__":
    main()
