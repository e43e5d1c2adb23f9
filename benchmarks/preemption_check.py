"""What preemption handling costs a 2-worker Keras fit: the per-step agreement and one save.

Under ``python -m tfx_dist.run -n 2`` (one TensorFlow thread per worker), the
seeds' model (Dense 784->256 relu, Dropout 0.2, Dense 128 relu, Dense 10
softmax; adam) on random data, per-worker batch 64:

* fit epochs of ``--steps`` steps without a callback and with
  ``tfx_dist.fault_tolerance.StepCheckpoint`` (preemption handling on, no
  periodic save), alternately, ``--rounds`` rounds after one warm-up epoch
  each: the median step time of each, and their difference;
* the agreement alone (``StopAgreement.should_stop(False)``: one max
  all-reduce of an int32), ``--checks`` calls;
* one checkpoint of the model (weights, Adam's slots): write and commit
  (fsync, SHA-256, rename, LATEST.json), then verify and restore.

    python benchmarks/preemption_check.py [--quick] [--out results/preemption_check.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
TAG = "PREEMPTION_CHECK "


def worker(args) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import keras
    import numpy as np

    import tfx_dist
    from tfx_dist.fault_tolerance import dense_state
    from tfx_dist.fault_tolerance.agreement import StopAgreement
    from tfx_dist.fault_tolerance.checkpoint_dir import CheckpointDir
    from tfx_dist.fault_tolerance.keras_callback import StepCheckpoint

    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    global_batch = 64 * strategy.num_replicas_in_sync
    rng = np.random.default_rng(0)
    x = rng.normal(size=(global_batch * args.steps, 784)).astype("float32")
    y = rng.integers(0, 10, size=(global_batch * args.steps,))
    with strategy.scope():
        model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                                  keras.layers.Dropout(0.2), keras.layers.Dense(128, activation="relu"),
                                  keras.layers.Dense(10, activation="softmax")])
        model.compile("adam", "sparse_categorical_crossentropy")
    folder = os.path.join(os.environ["BENCH_DIR"], "ckpt")

    def epoch(callbacks):
        start = time.perf_counter()
        model.fit(x, y, batch_size=global_batch, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
        return (time.perf_counter() - start) / args.steps

    def with_handling():
        return [StepCheckpoint(folder, save_freq=1 << 30)]

    epoch([]), epoch(with_handling())  # warm-up: tracing, connections
    plain, handled = [], []
    for _ in range(args.rounds):
        plain.append(epoch([]))
        handled.append(epoch(with_handling()))
    agreement = StopAgreement(strategy)
    start = time.perf_counter()
    for _ in range(args.checks):
        agreement.should_stop(False)
    check_s = (time.perf_counter() - start) / args.checks
    variables = dense_state.model_variables(model)
    save_s = restore_s = None
    if rank == 0:
        directory = CheckpointDir(os.path.join(os.environ["BENCH_DIR"], "save"))
        start = time.perf_counter()
        tmp = directory.begin(1)
        dense_state.save(variables, tmp)
        checkpoint = directory.commit(tmp, step=1, epoch=0, step_in_epoch=1, num_workers=2)
        save_s = time.perf_counter() - start
        start = time.perf_counter()
        dense_state.restore(variables, directory.latest().path)
        restore_s = time.perf_counter() - start
        size = sum(os.path.getsize(os.path.join(checkpoint.path, f)) for f in os.listdir(checkpoint.path))
        print(TAG + json.dumps({"plain_step_s": plain, "handled_step_s": handled, "check_s": check_s,
                                "save_s": save_s, "restore_s": restore_s, "checkpoint_bytes": size,
                                "steps": args.steps, "rounds": args.rounds, "checks": args.checks}),
              flush=True)


def markdown(report: dict) -> str:
    from common import table

    plain = statistics.median(report["plain_step_s"]) * 1e3
    handled = statistics.median(report["handled_step_s"]) * 1e3
    rows = [["no callback", f"{plain:.2f} ms", "-"],
            ["StepCheckpoint (preemption handling, no periodic save)", f"{handled:.2f} ms",
             f"{handled - plain:+.2f} ms ({(handled / plain - 1) * 100:+.1f}%)"]]
    return "\n".join([
        "## Preemption handling: cost per step and per save (2 workers, loopback)",
        "",
        f"{report['machine']}. The seeds' model (Dense 784->256 relu, Dropout 0.2, Dense 128 relu, "
        f"Dense 10 softmax; adam), per-worker batch 64, each worker one TensorFlow thread under "
        f"`tfx-dist-run -n 2`; epochs of {report['steps']} steps, with and without the callback "
        f"alternately, {report['rounds']} rounds; median step time of rank 0.",
        "",
        table(["fit", "step time", "difference"], rows),
        "",
        f"The agreement alone (one max all-reduce of an int32, `StopAgreement.should_stop`): "
        f"{report['check_s'] * 1e3:.3f} ms per check (mean of {report['checks']}). "
        f"One checkpoint of the model ({report['checkpoint_bytes'] / 2**20:.1f} MiB: weights, Adam's "
        f"slots and step, the dropout seed): written and committed (fsync, SHA-256, rename, LATEST.json) "
        f"in {report['save_s'] * 1e3:.0f} ms, verified and restored in {report['restore_s'] * 1e3:.0f} ms.",
        "",
        *([] if report.get("load", 0) <= report.get("cores", 2) else [
            f"Read with care: other jobs shared the {report['cores']} cores (load average "
            f"{report['load']:.1f}), so the step times are far above an idle machine's and this run "
            f"cannot tell the callback's cost from that contention. The agreement is one 4-byte "
            f"all-reduce; a Keras callback with a batch hook also makes `fit` wait for each step's "
            f"logs. `TFX_PREEMPTION_CHECK_STEPS=k` checks every k steps.", ""]),
        f"*Command: `python benchmarks/preemption_check.py{' --quick' if report['quick'] else ''}` "
        f"(run {report['when']}).*",
    ])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--checks", type=int, default=2000)
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.rounds, args.checks = 100, 3, 500
    if args.worker:
        worker(args)
        return
    import common

    bench_dir = tempfile.mkdtemp(prefix="tfx_preemption_bench-")
    env = dict(os.environ, BENCH_DIR=bench_dir, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    command = [sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", "900", sys.executable,
               os.path.abspath(__file__), "--worker", "--steps", str(args.steps), "--rounds",
               str(args.rounds), "--checks", str(args.checks)]
    try:
        proc = subprocess.run(command, env=env, cwd=ROOT, capture_output=True, text=True, timeout=1000)
    finally:
        shutil.rmtree(bench_dir, ignore_errors=True)
    lines = [line.split(TAG, 1)[1] for line in proc.stdout.splitlines() if TAG in line]
    if proc.returncode != 0 or not lines:
        sys.exit(f"benchmark failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    report = json.loads(lines[-1])
    load = os.getloadavg()[0]
    info = common.machine_info()
    report.update(load=load, cores=info["cores"], quick=args.quick,
                  when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  machine=f"{info['machine']}, {info['cores']} cores, load average {load:.1f} at the end")
    out, md = common.write_outputs("preemption_check", report, markdown(report), args.out)
    print(open(md).read())


if __name__ == "__main__":
    main()
