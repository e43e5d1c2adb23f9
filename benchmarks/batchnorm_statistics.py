"""What averaging BatchNormalization's moving statistics across workers costs a `model.fit` step.

`tfx_dist.MultiWorkerMirroredStrategy` creates each layer's non-trainable float
state with aggregation MEAN (`tfx_dist/strategies/moving_statistics.py`), so
every update of a moving mean or variance is one small cross-worker all-reduce.
This measures that against the same model whose statistics stay per worker
(aggregation NONE, as Keras 3 creates them: each worker's copy drifts).

A 2-worker job under `tfx-dist-run -n 2`, loopback, one TensorFlow thread per
worker. Both models live in the same processes and take turns, in rounds (the
machine is shared: its load drifts): a conv net on 16x16x3 images, --layers
blocks of Conv2D(16, 3) -> BatchNormalization -> ReLU, then global average
pooling and Dense(10); SGD; --batch examples per worker and step. Each turn is
one `fit` of --steps steps, timed by rank 0: the median of its steps after the
10th (each from the end of the step before to its own end). At the end every
worker times the statistics' all-reduces alone, with no step around them (see
`_statistics_alone`), and reports its first BN layer's moving mean: equal
across workers with the averaging, apart without (the check that the two
models differ only there).

    python benchmarks/batchnorm_statistics.py   # writes benchmarks/results/batchnorm_statistics.{json,md}
    python benchmarks/batchnorm_statistics.py --rounds 2 --steps 60 --out /tmp/bn.json
"""

from __future__ import annotations

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
sys.path.insert(0, HERE)
RESULT = "BN_STATISTICS "
VARIANTS = ("averaged", "per_worker", "averaged'")  # averaged': the A/A control


def _model(keras, layers: int):
    blocks = [keras.Input((16, 16, 3))]
    for _ in range(layers):
        blocks += [keras.layers.Conv2D(16, 3, padding="same", use_bias=False),
                   keras.layers.BatchNormalization(), keras.layers.ReLU()]
    blocks += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(10)]
    model = keras.Sequential(blocks)
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def worker(args) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    import tfx_dist
    from tfx_dist.strategies import moving_statistics

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    rank = strategy.cluster_info.rank
    models = {}
    with strategy.scope():
        keras.utils.set_random_seed(0)
        models["averaged"] = _model(keras, args.layers)
        averaged = moving_statistics.averaged
        moving_statistics.averaged = lambda kwargs: kwargs  # Keras 3's aggregation NONE
        try:
            keras.utils.set_random_seed(0)
            models["per_worker"] = _model(keras, args.layers)
        finally:
            moving_statistics.averaged = averaged
    aggregation = {name: str(getattr(getattr(m.layers[1].moving_mean, "value", None), "aggregation", "?"))
                   for name, m in models.items()}
    rng = np.random.default_rng(rank)  # each worker its own data: the statistics differ
    x = rng.normal(size=(args.batch * args.steps, 16, 16, 3)).astype(np.float32)
    y = rng.integers(0, 10, args.batch * args.steps)

    class Clock(keras.callbacks.Callback):
        """The median time between the ends of consecutive steps, after the 10th (a median: the
        machine is shared, and another process's burst stalls a few steps)."""

        def on_train_batch_end(self, batch, logs=None):
            now = time.perf_counter()
            if batch >= 10:
                self.steps.append(now - self.last)
            self.last = now

        def on_train_begin(self, logs=None):
            self.steps = []

        @property
        def per_step(self):
            return statistics.median(self.steps)

    def dataset(context):
        return tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch)

    def fit(model, steps, callbacks=()):
        model.fit(strategy.distribute_datasets_from_function(dataset), steps_per_epoch=steps, verbose=0,
                  callbacks=list(callbacks))

    for model in models.values():
        fit(model, 20)  # traced and warm
    times = {v: [] for v in VARIANTS}
    for r in range(args.rounds):
        order = VARIANTS[r % 3:] + VARIANTS[:r % 3]
        for variant in order:
            clock = Clock()
            fit(models[variant.rstrip("'")], args.steps, [clock])
            times[variant].append(clock.per_step)
    first_bn = {name: m.layers[1].moving_mean.numpy().tolist() for name, m in models.items()}
    line = RESULT + json.dumps({"rank": rank, "step_s": times, "first_bn_moving_mean": first_bn,
                                "aggregation": aggregation,
                                "statistics_alone_s": _statistics_alone(tf, strategy, 2 * args.layers)})
    sys.stdout.write(line + "\n")  # one write: the launcher merges both ranks' output
    sys.stdout.flush()


def _statistics_alone(tf, strategy, count: int, calls: int = 300) -> dict:
    """The statistics' all-reduces alone, outside any step: seconds per tf.function call (median)
    of ``count`` all-reduces of 16 floats, each one transport call as the averaging issues them
    (the mean over the job's replicas): ``chained``, each after the one before (as the layers'
    updates come, one by one in the forward pass: the worst case, a round of the runtime each);
    ``together``, all ready at once; and ``fused``, the same tensors in one call."""
    ops = strategy.extended._cross_device_ops
    replicas = strategy.num_replicas_in_sync
    values = [tf.fill([16], float(i)) for i in range(count)]

    def chained():
        out = [ops._cross_all_reduce([values[0]], replicas)[0]]
        for v in values[1:]:
            out.append(ops._cross_all_reduce([v + 0 * out[-1]], replicas)[0])
        return out

    kinds = {
        "chained": tf.function(chained),
        "together": tf.function(lambda: [ops._cross_all_reduce([v], replicas)[0] for v in values]),
        "fused": tf.function(lambda: ops._cross_all_reduce(values, replicas)),
    }
    out = {}
    for name, fn in kinds.items():
        fn()
        seconds = []
        for _ in range(calls):
            started = time.perf_counter()
            fn()
            seconds.append(time.perf_counter() - started)
        out[name] = statistics.median(seconds)
    return out


def run_job(args) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    cmd = [sys.executable, "-m", "tfx_dist.run", "-n", "2", "--", sys.executable, os.path.abspath(__file__),
           "--worker", "--rounds", str(args.rounds), "--steps", str(args.steps), "--layers",
           str(args.layers), "--batch", str(args.batch)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=args.timeout)
    results = [json.loads(line.split(RESULT, 1)[1]) for line in proc.stdout.splitlines() if RESULT in line]
    if proc.returncode != 0 or len(results) != 2:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        sys.exit(1)
    return sorted(results, key=lambda r: r["rank"])


def summary(ranks: list[dict]) -> dict:
    times = ranks[0]["step_s"]
    medians = {v: statistics.median(t) for v, t in times.items()}
    cost = [a / p - 1 for a, p in zip(times["averaged"], times["per_worker"])]
    control = [b / a - 1 for a, b in zip(times["averaged"], times["averaged'"])]
    spread = {name: max(abs(a - b) for a, b in zip(ranks[0]["first_bn_moving_mean"][name],
                                                   ranks[1]["first_bn_moving_mean"][name]))
              for name in ranks[0]["first_bn_moving_mean"]}
    alone = ranks[0]["statistics_alone_s"]
    return {"median_step_ms": {v: round(m * 1e3, 3) for v, m in medians.items()},
            "statistics_alone_ms": {k: round(v * 1e3, 3) for k, v in alone.items()},
            "statistics_alone_share_of_step": round(alone["chained"] / medians["averaged"], 4),
            "averaging_cost_per_round": [round(c, 4) for c in cost],
            "averaging_cost_median": round(statistics.median(cost), 4),
            "a_a_control_per_round": [round(c, 4) for c in control],
            "first_bn_moving_mean_max_difference_between_workers": spread,
            "aggregation": ranks[0]["aggregation"]}


def markdown(report: dict) -> str:
    s, a = report["summary"], report["args"]
    la = report["load_average_before"], report["load_average_after"]
    steps = s["median_step_ms"]
    control_ms = steps["averaged'"]
    alone = s["statistics_alone_ms"]
    diff = s["first_bn_moving_mean_max_difference_between_workers"]
    lines = [
        "# BatchNormalization statistics averaged across workers: cost per `fit` step", "",
        f"{report['date']}; load average (1 min) {la[0][0]:.1f} before, {la[1][0]:.1f} after, on "
        f"{report['cpus']} shared cores. 2 workers under `tfx-dist-run -n 2`, one TensorFlow thread each; "
        f"{a['layers']} x (Conv2D(16, 3) -> BatchNormalization -> ReLU) on 16x16x3, {a['batch']} examples "
        f"per worker and step, SGD; {a['rounds']} rounds of one `fit` of {a['steps']} steps per variant, "
        "in rotating order; per turn rank 0's median step after the 10th.", "",
        "| variant | median step | what it is |", "|---|---|---|",
        f"| averaged | {steps['averaged']:.2f} ms | tfx_dist's default: aggregation MEAN, "
        f"{2 * a['layers']} all-reduces of 16 floats per step |",
        f"| per worker | {steps['per_worker']:.2f} ms | Keras 3's aggregation NONE: no all-reduce, "
        "each worker's statistics its own |",
        f"| averaged' | {control_ms:.2f} ms | averaged again (A/A control) |", "",
        f"Cost of the averaging per round (averaged / per worker - 1): "
        f"{', '.join(f'{c:+.1%}' for c in s['averaging_cost_per_round'])}; median "
        f"**{s['averaging_cost_median']:+.1%}**. A/A control (averaged' / averaged - 1): "
        f"{', '.join(f'{c:+.1%}' for c in s['a_a_control_per_round'])}; median "
        f"{statistics.median(s['a_a_control_per_round']):+.1%}.", "",
        f"The statistics' all-reduces alone, outside any step (rank 0, median of 300 calls of one "
        f"`tf.function`): {2 * a['layers']} all-reduces of 16 floats, one transport call each as the "
        f"averaging issues them, each after the one before (the worst case: a round of the runtime "
        f"each) {alone['chained']:.2f} ms (**{s['statistics_alone_share_of_step']:.1%}** of the averaged "
        f"step, an upper bound: in a step they overlap the compute), all ready at once "
        f"{alone['together']:.2f} ms; the same tensors in one call (fused) {alone['fused']:.2f} ms.", "",
        f"First BN layer's moving mean, largest difference between the workers after the runs: "
        f"averaged {diff['averaged']:.2g}, per worker {diff['per_worker']:.2g}.", "",
        f"*Command: `{report['command']}`.*", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "batchnorm_statistics.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    import common

    load_before, started = os.getloadavg(), time.monotonic()
    ranks = run_job(args)
    report = {"command": "python " + " ".join(["benchmarks/batchnorm_statistics.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count(),
              "args": {k: getattr(args, k) for k in ("rounds", "steps", "layers", "batch")},
              "load_average_before": load_before, "load_average_after": os.getloadavg(),
              "wall_s": round(time.monotonic() - started, 1), "summary": summary(ranks), "ranks": ranks}
    md = markdown(report)
    common.write_outputs("batchnorm_statistics", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
