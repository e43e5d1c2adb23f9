"""Keras ``fit`` throughput with tfx_dist.MultiWorkerMirroredStrategy on 1, 2 and 4 workers.

The seeds' model (Dense 784->256 relu, Dropout 0.2, Dense 128 relu, Dense 10
softmax; adam; sparse categorical cross-entropy) on random data, per-worker
batch 64 (global batch 64 x workers). Every worker is a real process started by
the launcher (``python -m tfx_dist.run -n N``) and limited to ONE TensorFlow
thread (intra-op 1, inter-op 1, set before TensorFlow initialises), so that
N workers use N cores' worth of compute. The first epoch (warm-up: tracing,
connection set-up) is excluded; then each timed epoch runs a fixed number of
steps (300: long enough that what every epoch starts with, a new distributed
iterator and a callback round, does not weigh on the step rate) and rank 0 times it (the workers run in lock-step: every step
all-reduces the gradients). Reports examples/s (median over timed epochs) and
the 2/1 and 4/1 worker ratios.

TensorFlow's own ``tf.distribute.MultiWorkerMirroredStrategy`` is run once,
with 2 workers, to record how its first Keras 3 ``fit`` fails.

    python benchmarks/multi_worker_fit.py [--quick] [--out results/multi_worker_fit.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)  # tfx_dist from this checkout, installed or not (workers too)
RESULT_TAG = "MWFIT_RESULT "
PER_WORKER_BATCH = 64
TARGET_2X = 1.7


# --------------------------------------------------------------------------- worker side

def worker(args) -> None:
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    import keras
    import numpy as np

    if args.impl == "tf":
        strategy = tf.distribute.MultiWorkerMirroredStrategy()
    else:
        import tfx_dist
        strategy = tfx_dist.MultiWorkerMirroredStrategy()
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = len(json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"])
    global_batch = PER_WORKER_BATCH * strategy.num_replicas_in_sync

    rng = np.random.default_rng(0)
    n = global_batch * args.steps
    x = rng.random((n, 784), dtype=np.float32)
    y = rng.integers(0, 10, size=n).astype("int64")

    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = keras.Sequential([
            keras.Input(shape=(784,)),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.2),
            keras.layers.Dense(128, activation="relu"),
            keras.layers.Dense(10, activation="softmax"),
        ])
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")

    def comm_stats():
        communicator = getattr(getattr(strategy.extended, "_transport", None), "communicator", None)
        return communicator.stats() if communicator is not None else {}

    class Timer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.times = []
            self.cpu = []   # this process's CPU seconds per epoch (every thread)
            self.comm = []  # communicator counters per epoch (multi-worker only)

        def on_epoch_begin(self, epoch, logs=None):
            self.t0 = time.perf_counter()
            self.cpu0 = time.process_time()
            self.comm0 = comm_stats()

        def on_epoch_end(self, epoch, logs=None):
            self.times.append(time.perf_counter() - self.t0)
            self.cpu.append(time.process_time() - self.cpu0)
            end = comm_stats()
            self.comm.append({k: end[k] - self.comm0[k] for k in end})

    timer = Timer()
    try:
        model.fit(x, y, batch_size=global_batch, epochs=1 + args.epochs, shuffle=False,
                  verbose=0, callbacks=[timer])
    except Exception as e:  # noqa: BLE001 -- recorded, this is the point for impl=tf
        if rank == 0:
            first = (str(e).strip().splitlines() or [""])[0]
            head = (str(e).strip().splitlines() or [""])[-1].strip()[:300]
            print(RESULT_TAG + json.dumps({"ok": False, "error_type": type(e).__name__,
                                           "error": first[:400], "error_head": head}),
                  flush=True)
        return
    if rank == 0:
        timed = timer.times[1:]
        eps = [global_batch * args.steps / t for t in timed]
        steps_timed = args.steps * len(timed)
        comm = {}
        if timer.comm[1:] and timer.comm[1]:
            total = {k: sum(c[k] for c in timer.comm[1:]) for k in timer.comm[1]}
            comm = {"collectives_per_step": total["collectives"] / steps_timed,
                    "waiting_ms_per_step": 1000 * total["waiting_s"] / steps_timed,
                    "running_ms_per_step": 1000 * total["running_s"] / steps_timed}
        print(RESULT_TAG + json.dumps({
            "ok": True, "workers": workers, "replicas": strategy.num_replicas_in_sync,
            "global_batch": global_batch, "steps_per_epoch": args.steps,
            "warmup_epoch_s": timer.times[0], "epoch_s": timed,
            "examples_per_s": statistics.median(eps), "examples_per_s_all": eps,
            "step_ms": 1000 * statistics.median(timed) / args.steps,
            "cpu_ms_per_step": 1000 * sum(timer.cpu[1:]) / steps_timed, "comm": comm,
            "tensorflow": tf.__version__, "keras": keras.__version__}), flush=True)


# --------------------------------------------------------------------------- driver side

def launch(n: int, impl: str, steps: int, epochs: int, bfc: bool, timeout: float,
           cpus=None) -> dict:
    """Runs one job of n workers under the launcher (restricted to ``cpus`` if given)."""
    cmd = [sys.executable, "-m", "tfx_dist.run", "-n", str(n), "--timeout", str(timeout), "--",
           sys.executable, os.path.abspath(__file__), "--worker", "--impl", impl,
           "--steps", str(steps), "--epochs", str(epochs)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    if bfc:
        env["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    else:
        env.pop("TF_CPU_ALLOCATOR_USE_BFC", None)
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout + 60,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    wall = time.time() - t0
    for line in proc.stdout.splitlines():
        if RESULT_TAG in line:
            r = json.loads(line.split(RESULT_TAG, 1)[1])
            r.update(launcher_rc=proc.returncode, wall_s=wall)
            return r
    return {"ok": False, "error": "no result line", "launcher_rc": proc.returncode,
            "wall_s": wall, "log_tail": proc.stdout[-2000:]}


def launch_pair(impl: str, steps: int, epochs: int, bfc: bool, timeout: float) -> dict:
    """Two independent one-worker jobs at the same time: what two one-thread
    processes get out of this machine with no communication at all. Each job
    gets the CPUs the launcher binds that rank of a 2-worker job to."""
    from tfx_dist.run import cpu_shares

    shares = cpu_shares(2) or [None, None]
    results = [None, None]

    def one(i):
        results[i] = launch(1, impl, steps, epochs, bfc, timeout, cpus=shares[i])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if not all(r and r.get("ok") for r in results):
        bad = next(r for r in results if not (r and r.get("ok")))
        return dict(bad or {}, ok=False)
    return {"ok": True, "examples_per_s": sum(r["examples_per_s"] for r in results),
            "jobs": results, "cpu_ms_per_step": statistics.mean(r["cpu_ms_per_step"] for r in results),
            "tensorflow": results[0]["tensorflow"], "keras": results[0]["keras"]}


def markdown(res: dict) -> str:
    lines = ["## Multi-worker Keras fit (tfx_dist.MultiWorkerMirroredStrategy)", "",
             f"{res['machine']}. The seeds' model (Dense 784->256 relu, Dropout 0.2, Dense 128 "
             f"relu, Dense 10 softmax; adam, sparse CE) on random data; per-worker batch "
             f"{PER_WORKER_BATCH}, global batch {PER_WORKER_BATCH} x workers. Each worker is its "
             f"own process under `python -m tfx_dist.run -n N` (which binds each of N >= 2 workers "
             f"to its own share of the CPUs, as `mpirun --bind-to core` does; a lone worker is "
             f"not bound), limited to ONE TensorFlow thread "
             f"(intra-op 1, inter-op 1); TensorFlow CPU allocator: "
             f"{'BFC (`TF_CPU_ALLOCATOR_USE_BFC=true`)' if res['bfc'] else 'default'}. "
             f"First epoch excluded (warm-up); then {res['epochs']} timed epochs of "
             f"{res['steps']} steps each, timed by rank 0; median examples/s "
             f"(global examples per second)"
             + (f" over all timed epochs of {res['rounds']} rounds (each round runs 1, 2, 4 "
                f"workers in turn)" if res['rounds'] > 1 else "") + ".", "",
             "| workers | examples/s | step time | vs 1 worker | CPU per step, per worker | timed epochs (examples/s) |",
             "|---|---|---|---|---|---|"]
    base = res["configs"].get("1", {}).get("examples_per_s")
    for n, r in res["configs"].items():
        if not r.get("ok"):
            lines.append(f"| {n} | failed: {r.get('error', '?')[:200]} | | | | |")
            continue
        ratio = f"{r['examples_per_s'] / base:.2f}x" if base else "-"
        lines.append(f"| {n} | {r['examples_per_s']:.0f} | {r['step_ms']:.2f} ms | {ratio} | "
                     f"{r['cpu_ms_per_step']:.2f} ms | "
                     + ", ".join(f"{e:.0f}" for e in r["examples_per_s_all"]) + " |")
    pair = res.get("pair")
    if pair:
        lines.append(f"| 2 separate 1-worker jobs at once (no communication) | "
                     f"{pair['examples_per_s']:.0f} (sum) | - | {pair['ratio']:.2f}x | "
                     f"{pair['cpu_ms_per_step']:.2f} ms | round by round: "
                     + ", ".join(f"{x:.2f}x" for x in pair["per_round"]) + " |")
    lines += ["", "*CPU per step*: the process's CPU time (all its threads) over the timed "
              "epochs divided by their steps, median over rounds (rank 0)."]
    if pair:
        lines.append(f"The last row is this machine's own ceiling for two one-thread processes in "
                     f"this run: two independent single-worker trainings started together, "
                     f"each on the CPUs the launcher gives that rank of a 2-worker job, "
                     f"{pair['ratio']:.2f}x one alone.")
    two = res["configs"].get("2", {})
    if two.get("ok") and two.get("comm"):
        cm = two["comm"]
        lines.append(f"2 workers, rank 0's communicator per step (`Communicator.stats()`): "
                     f"{cm['collectives_per_step']:.2f} collectives (the gradients, and Keras's "
                     f"reduction of the logs when it does not fuse with them), "
                     f"{cm['waiting_ms_per_step']:.2f} ms from submission until both ranks were "
                     f"ready and it could run, {cm['running_ms_per_step']:.2f} ms running "
                     "(summed over collectives; they overlap other work in part).")
    lines.append("")
    t = res.get("ratios", {})
    if "2/1" in t:
        per = res.get("ratios_per_round", {})
        lines.append(f"Target: 2-worker throughput >= {TARGET_2X}x one worker's: **{t['2/1']:.2f}x, "
                     f"{'met' if t['2/1'] >= TARGET_2X else 'NOT met'}**"
                     + (f" (round by round: {', '.join(f'{x:.2f}x' for x in per['2/1'])})"
                        if per.get("2/1") else "")
                     + (f". 4 workers / 1: {t['4/1']:.2f}x" if "4/1" in t else "")
                     + (f" (round by round: {', '.join(f'{x:.2f}x' for x in per['4/1'])})"
                        if per.get("4/1") else "") + ".")
    if "4" in res["configs"]:
        lines += ["", f"Caveat: this machine has {res['cores']} cores, so 4 one-thread workers "
                  "oversubscribe it (4 busy processes plus their communication threads share 2 "
                  "cores); the 4-worker figure measures contention, not scaling, and cannot exceed "
                  "the 2-core ceiling."]
    lines.append("")
    tf = res.get("tf_mwms")
    if tf:
        if tf.get("ok"):
            lines.append("TensorFlow's own `tf.distribute.MultiWorkerMirroredStrategy` (2 workers) "
                         f"trained this time: {tf['examples_per_s']:.0f} examples/s.")
        else:
            lines.append("No TensorFlow baseline: `tf.distribute.MultiWorkerMirroredStrategy` run "
                         "the same way with 2 workers fails on its first Keras 3 `fit` "
                         f"(recorded in this run; first line): `{tf.get('error_type', '')}: "
                         f"{tf.get('error', '')[:300]}` ... (a dump of the PerReplica input batch) ... "
                         f"`{tf.get('error_head', '')[:300]}`.")
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", choices=("tfx", "tf"), default="tfx", help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=None, help="steps per epoch")
    p.add_argument("--epochs", type=int, default=None, help="timed epochs (after 1 warm-up)")
    p.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--rounds", type=int, default=None, help="repeat every configuration")
    p.add_argument("--no-bfc", action="store_true", help="TF's default CPU allocator")
    p.add_argument("--skip-tf", action="store_true", help="skip the TF MWMS failure check")
    p.add_argument("--timeout", type=float, default=300, help="seconds per launch")
    p.add_argument("--no-pair", dest="pair", action="store_false",
                   help="skip the two separate 1-worker jobs run at once (the machine's ceiling)")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default=os.path.join(HERE, "results", "multi_worker_fit.json"))
    args = p.parse_args()
    if args.worker:
        return worker(args)

    steps = args.steps or (30 if args.quick else 300)
    epochs = args.epochs or (2 if args.quick else 3)
    rounds = args.rounds or (1 if args.quick else 3)
    bfc = not args.no_bfc
    t_start = time.time()
    sys.path.insert(0, HERE)
    import common

    info = common.machine_info()
    res = {"machine": f"{info['machine']}, {info['cores']} cores, {info['cpu']}",
           "cores": info["cores"], "date": info["date"], "quick": args.quick, "steps": steps,
           "epochs": epochs, "rounds": rounds, "tf_cpu_allocator": "bfc" if bfc else "default", "bfc": bfc, "threads_per_worker": 1,
           "per_worker_batch": PER_WORKER_BATCH, "configs": {}, "runs": [], "pair_runs": []}
    for rnd in range(rounds):
        for n in args.workers:
            print(f"== round {rnd + 1}: {n} worker(s)", flush=True)
            r = launch(n, "tfx", steps, epochs, bfc, args.timeout)
            print(f"   {json.dumps({k: r.get(k) for k in ('ok', 'examples_per_s', 'step_ms', 'wall_s', 'error')})}",
                  flush=True)
            if not r.get("ok"):
                print(r.get("log_tail", ""), flush=True)
            res["runs"].append(dict(r, workers=n, round=rnd))
        if args.pair:
            print(f"== round {rnd + 1}: two separate 1-worker jobs at once", flush=True)
            r = launch_pair("tfx", steps, epochs, bfc, args.timeout)
            print(f"   {json.dumps({k: r.get(k) for k in ('ok', 'examples_per_s', 'error')})}", flush=True)
            res["pair_runs"].append(dict(r, round=rnd))
    # Per configuration: the median over every timed epoch of every round (the rounds
    # interleave the configurations, so a noisy spell on the shared machine hits them all).
    for n in args.workers:
        ok = [r for r in res["runs"] if r["workers"] == n and r.get("ok")]
        if not ok:
            res["configs"][str(n)] = next(r for r in res["runs"] if r["workers"] == n)
            continue
        eps = [e for r in ok for e in r["examples_per_s_all"]]
        med = statistics.median(eps)
        comm = [r["comm"] for r in ok if r.get("comm")]
        res["configs"][str(n)] = {"ok": True, "examples_per_s": med, "examples_per_s_all": eps,
                                  "step_ms": 1000 * PER_WORKER_BATCH * n / med,
                                  "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in ok),
                                  "comm": {k: statistics.median(c[k] for c in comm) for k in comm[0]}
                                  if comm else {},
                                  "rounds_ok": len(ok), "tensorflow": ok[0]["tensorflow"],
                                  "keras": ok[0]["keras"]}
    c = res["configs"]
    if c.get("1", {}).get("ok"):
        for n in ("2", "4"):
            if c.get(n, {}).get("ok"):
                res["ratios"] = res.get("ratios", {})
                res["ratios"][f"{n}/1"] = c[n]["examples_per_s"] / c["1"]["examples_per_s"]
                # The same ratio round by round (each round's medians), to show the spread.
                per = []
                for rnd in range(rounds):
                    a = [r for r in res["runs"] if r["round"] == rnd and r.get("ok")]
                    one = [r["examples_per_s"] for r in a if r["workers"] == 1]
                    this = [r["examples_per_s"] for r in a if r["workers"] == int(n)]
                    if one and this:
                        per.append(this[0] / one[0])
                res.setdefault("ratios_per_round", {})[f"{n}/1"] = per
        pairs = [r for r in res["pair_runs"] if r.get("ok")]
        if pairs:
            res["pair"] = {"examples_per_s": statistics.median(r["examples_per_s"] for r in pairs),
                           "cpu_ms_per_step": statistics.median(r["cpu_ms_per_step"] for r in pairs),
                           "per_round": [r["examples_per_s"] / one["examples_per_s"]
                                         for r in pairs for one in res["runs"]
                                         if one["workers"] == 1 and one["round"] == r["round"]
                                         and one.get("ok")]}
            res["pair"]["ratio"] = res["pair"]["examples_per_s"] / c["1"]["examples_per_s"]
        if "2/1" in res.get("ratios", {}):
            res["target_2w_1.7x"] = {"ok": res["ratios"]["2/1"] >= TARGET_2X,
                                     "ratio": res["ratios"]["2/1"]}
    if not args.skip_tf:
        print("== TensorFlow's MultiWorkerMirroredStrategy, 2 workers (expected to fail)", flush=True)
        res["tf_mwms"] = launch(2, "tf", min(steps, 20), 1, bfc, min(args.timeout, 180))
        print(f"   {json.dumps(res['tf_mwms'])[:600]}", flush=True)
    for r in c.values():
        if r.get("ok"):
            res["machine_versions"] = {"tensorflow": r["tensorflow"], "keras": r["keras"]}
    res["wall_s"] = time.time() - t_start
    md = markdown(res)
    common.write_outputs("multi_worker_fit", res, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
