"""Click-through training throughput on 2 parameter servers + 2 workers, and worker memory.

The model (the same in every system): 26 categorical features, each example's
26 ids (Zipf-distributed, exponent ZIPF_A, over the table) looked up in one
table of ROWS x 64 float32 (the 26 features share it: 26 tables of that size
would not fit a shared machine twice over), the 26 rows concatenated, then
Dense(64, relu), Dense(1, sigmoid); binary cross-entropy; plain SGD
(learning rate 0.05: the one rule every system applies to sparse rows the same
way); global batch 4096 (2048 per worker). Random labels: the speed, not the
model, is measured.

Systems, one after the other in one run (their processes never overlap):

* **tfx_dist PS**: `tfx_dist.ParameterServerStrategy`, 2 ps + 2 workers, the
  table a `ShardedEmbedding` on the servers, Keras ``fit``.
* **tfx_dist PS, dense variables on the servers**: the same with
  ``dense_variables="servers"``: the two Dense layers' weights live on the
  servers too; each step pushes their gradient and pulls them back.
* **TF PS custom loop**: TensorFlow's `tf.distribute.ParameterServerStrategy`
  (chief + 2 workers + 2 ps, `tf.distribute.Server` processes), the table a
  `ShardedVariable` from a ``variable_partitioner`` (2 shards), a
  `ClusterCoordinator` scheduling a `tf.function` step on the workers (gather,
  tape, ``scatter_sub`` of the table's sparse gradient, ``assign_sub`` of the
  dense ones). Raw TF variables: Keras 3 layers do not run under TF's PS.
* **dense Embedding under MWMS**: `keras.layers.Embedding(ROWS, 64)` under
  `tfx_dist.MultiWorkerMirroredStrategy`, 2 workers (the table replicated on
  each, its sparse gradient all-gathered), Keras ``fit``; only where it fits.

Each runs WARMUP untimed steps then STEPS timed ones; examples/s = global
batch x STEPS / time. Worker memory: each tfx_dist worker's resident set
(VmRSS) after training, for each table size (--rows 1000000 10000000): the
table lives on the servers, so it must not grow with the table.

    PYTHONPATH=. python3 benchmarks/ps_ctr.py [--quick] [--rows 1000000 10000000] [--out ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
import common  # noqa: E402

FEATURES, DIM, GLOBAL_BATCH, HIDDEN, LR, ZIPF_A = 26, 64, 4096, 64, 0.05, 1.2
TARGET = 3.0
NOTE = ("TensorFlow's PS loop is asynchronous (each worker's step applies its own gradient, no "
        "barrier); tfx_dist's is synchronous (every step applies both workers' gradients once). The "
        "dense `Embedding` under MWMS all-gathers the table's sparse gradient and applies it to a "
        "full replica on each worker. Larger tables run for tfx_dist only (memory rows); its servers "
        "create rows on first lookup, so they hold the rows the Zipf ids touched.")
RESULT_TAG = "PS_CTR_RESULT "


def _data(rows: int, steps: int, rank: int, workers: int):
    """This worker's batches: Zipf ids (folded into the table), random labels."""
    import numpy as np
    rng = np.random.default_rng(1 + rank)
    per_worker = GLOBAL_BATCH // workers
    ids = (rng.zipf(ZIPF_A, (steps * per_worker, FEATURES)) - 1) % rows
    # Spread each feature's popular ids over the table, as hashing features would.
    ids = (ids * 2654435761 + np.arange(FEATURES) * 97) % rows
    labels = rng.integers(0, 2, (steps * per_worker, 1)).astype("float32")
    return ids.astype("int64"), labels, per_worker


def _rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def _peak_rss_bytes() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


def _keras_model(embedding):
    import keras
    inputs = keras.Input((FEATURES,), dtype="int64")
    x = keras.layers.Flatten()(embedding(inputs))
    x = keras.layers.Dense(HIDDEN, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(x))
    model.compile(keras.optimizers.SGD(LR), "binary_crossentropy")
    return model


class _StepTimer:
    """A Keras callback: time from the end of step WARMUP to the end of the last step."""

    def __init__(self, warmup):
        import keras

        class Timer(keras.callbacks.Callback):
            def on_train_batch_end(cb, batch, logs=None):  # noqa: N805
                if batch + 1 == warmup:
                    self.start = time.perf_counter()
                self.end = time.perf_counter()

        self.callback = Timer()
        self.start = self.end = None


def _fit_task(args, strategy, make_embedding) -> None:
    import tensorflow as tf
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    workers = strategy.num_replicas_in_sync
    total = args.warmup + args.steps
    ids, labels, per_worker = _data(args.rows, total, rank, workers)
    with strategy.scope():
        model = _keras_model(make_embedding())
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    dataset = tf.data.Dataset.from_tensor_slices((ids, labels)).batch(per_worker).with_options(options)
    timer = _StepTimer(args.warmup)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[timer.callback])
    seconds = timer.end - timer.start
    print(RESULT_TAG + json.dumps({"seconds": seconds, "steps": args.steps, "rss": _rss_bytes(),
                                   "peak_rss": _peak_rss_bytes()}), flush=True)


def tfx_ps_task(args, dense_variables="workers") -> None:
    import tfx_dist
    # A ps task serves here, then exits.
    strategy = tfx_dist.ParameterServerStrategy(dense_variables=dense_variables)
    _fit_task(args, strategy, lambda: tfx_dist.layers.ShardedEmbedding(args.rows, DIM, name="table"))


def mwms_task(args) -> None:
    import keras

    import tfx_dist
    strategy = tfx_dist.MultiWorkerMirroredStrategy()
    _fit_task(args, strategy, lambda: keras.layers.Embedding(args.rows, DIM, name="table"))


def tf_server_task(args) -> None:
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    server.join()  # killed by the launcher when the chief is done


def tf_chief_task(args) -> None:
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    def table_in_two(shape, dtype):  # the table in 2 shards by row; dense weights whole
        return [2 if shape[0] == args.rows else 1] + [1] * (len(shape) - 1)

    strategy = tf.distribute.ParameterServerStrategy(resolver, variable_partitioner=table_in_two)
    workers = 2
    total = args.warmup + args.steps
    with strategy.scope():
        table = tf.Variable(tf.random.uniform((args.rows, DIM), -0.05, 0.05, seed=1), name="table")
    with strategy.scope():  # dense weights: whole variables, placed round-robin on the ps
        w1 = tf.Variable(tf.random.normal((FEATURES * DIM, HIDDEN), stddev=0.02, seed=2))
        b1 = tf.Variable(tf.zeros((HIDDEN,)))
        w2 = tf.Variable(tf.random.normal((HIDDEN, 1), stddev=0.02, seed=3))
        b2 = tf.Variable(tf.zeros((1,)))
    dense = [w1, b1, w2, b2]
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    ids, labels, per_worker = _data(args.rows, total, 0, workers)

    def dataset_fn():
        return tf.data.Dataset.from_tensor_slices((ids, labels)).batch(per_worker).repeat()

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def step(iterator):
        batch_ids, batch_labels = next(iterator)
        unique, position = tf.unique(tf.reshape(batch_ids, [-1]))
        rows = tf.nn.embedding_lookup(table, unique)
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch([rows] + dense)
            x = tf.reshape(tf.gather(rows, position), [-1, FEATURES * DIM])
            hidden = tf.nn.relu(x @ w1 + b1)
            logits = hidden @ w2 + b2
            loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(batch_labels, logits))
        grads = tape.gradient(loss, [rows] + dense)
        # Each worker's mean gradient, like Keras's per-replica scaling (workers apply asynchronously).
        row_grads = tf.convert_to_tensor(grads[0])  # one row per distinct id (gather sums repeats)
        table.scatter_sub(tf.IndexedSlices(LR * row_grads / workers, unique))
        for var, grad in zip(dense, grads[1:]):
            var.assign_sub(LR * grad / workers)
        return loss

    for _ in range(args.warmup):
        coordinator.schedule(step, args=(iterator,))
    coordinator.join()
    start = time.perf_counter()
    losses = [coordinator.schedule(step, args=(iterator,)) for _ in range(args.steps)]
    coordinator.join()
    seconds = time.perf_counter() - start
    # Each scheduled step is one worker's half of a global batch: STEPS scheduled steps are
    # STEPS / 2 global batches.
    print(RESULT_TAG + json.dumps({"seconds": seconds, "steps": args.steps / workers,
                                   "last_loss": float(losses[-1].fetch()),
                                   "shards": [v.device for v in table.variables]}), flush=True)


# --------------------------------------------------------------------------- launcher side

def _free_ports(n):
    import socket
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


_SECRET = os.environ.get("TFX_JOB_SECRET") or os.urandom(16).hex()  # one per launcher run


def _start(role: str, tf_config: dict, args, rows: int) -> subprocess.Popen:
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2",
               TFX_JOB_SECRET=_SECRET,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--rows", str(rows),
           "--steps", str(args.steps), "--warmup", str(args.warmup)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _result_of(proc: subprocess.Popen, what: str, timeout_s: float) -> dict:
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise RuntimeError(f"{what} gave no result within {timeout_s:.0f} s") from None
    for line in out.splitlines():
        if line.startswith(RESULT_TAG):
            return json.loads(line[len(RESULT_TAG):])
    raise RuntimeError(f"{what} exited {proc.returncode} without a result:\n{out[-3000:]}")


def _run_job(args, rows, worker_role, server_role=None, chief_role=None) -> list[dict]:
    """Starts one job; returns the result of every process that reports one."""
    ports = _free_ports(5)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:2]]}
    if server_role is not None:
        cluster["ps"] = [f"127.0.0.1:{p}" for p in ports[2:4]]
    if chief_role is not None:
        cluster["chief"] = [f"127.0.0.1:{ports[4]}"]
    procs, reporters = [], []
    for task_type, role in (("ps", server_role), ("worker", worker_role)):
        for i in range(len(cluster.get(task_type, [])) if role else 0):
            procs.append(_start(role, {"cluster": cluster, "task": {"type": task_type, "index": i}},
                                args, rows))
            if role != "tf-server":
                reporters.append((f"{role} {task_type} {i}", procs[-1]))
    if chief_role is not None:
        procs.append(_start(chief_role, {"cluster": cluster, "task": {"type": "chief", "index": 0}},
                            args, rows))
        reporters.append(("TF chief", procs[-1]))
    try:
        results = []
        for what, proc in reporters:
            if what.startswith("tfx-ps") and " ps " in what:  # servers report nothing; they must exit 0
                proc.wait(timeout=args.timeout)
                if proc.returncode != 0:
                    raise RuntimeError(f"{what} exited {proc.returncode}: {proc.stdout.read()[-2000:]}")
                continue
            results.append(_result_of(proc, what, args.timeout))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def _rate(results: list[dict]) -> float:
    # Synchronous workers: the slowest worker's time is the job's.
    seconds = max(r["seconds"] for r in results)
    return GLOBAL_BATCH * results[0]["steps"] / seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default=None)
    parser.add_argument("--rows", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=540)
    parser.add_argument("--baselines-at", type=int, default=1_000_000,
                        help="table size at which the baselines run (the largest that fits)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    if args.role:
        rows = args.rows[0]
        args.rows = rows
        {"tfx-ps": tfx_ps_task, "tfx-ps-dense": lambda a: tfx_ps_task(a, "servers"), "mwms": mwms_task, "tf-server": tf_server_task,
         "tf-chief": tf_chief_task}[args.role](args)
        return
    if args.quick:
        args.rows, args.steps, args.warmup, args.baselines_at = [100_000, 1_000_000], 5, 2, 100_000
    systems, memory = {}, {}
    for rows in args.rows:
        res = _run_job(args, rows, "tfx-ps", server_role="tfx-ps")
        memory[rows] = {"rss": max(r["rss"] for r in res), "peak_rss": max(r["peak_rss"] for r in res)}
        if rows == args.baselines_at:
            systems["tfx_dist PS (Keras fit)"] = _rate(res)
    systems["tfx_dist PS, dense variables on the servers (Keras fit)"] = _rate(
        _run_job(args, args.baselines_at, "tfx-ps-dense", server_role="tfx-ps-dense"))
    for name, kw in (("TF PS custom loop (ClusterCoordinator)",
                      dict(worker_role="tf-server", server_role="tf-server", chief_role="tf-chief")),
                     ("dense keras Embedding, tfx_dist MWMS (Keras fit)", dict(worker_role="mwms"))):
        try:
            systems[name] = _rate(_run_job(args, args.baselines_at, **kw))
        except RuntimeError as e:
            systems[name] = None
            print(f"{name} failed: {e}", file=sys.stderr)
    ours = systems["tfx_dist PS (Keras fit)"]
    baselines = [v for k, v in systems.items() if v and not k.startswith("tfx_dist PS")]
    ratio = ours / max(baselines) if baselines else None
    small, large = min(memory), max(memory)
    growth = memory[large]["rss"] / memory[small]["rss"]
    dense_on_servers = systems["tfx_dist PS, dense variables on the servers (Keras fit)"] / ours
    report = {"machine": common.machine_info(), "rows": args.rows, "baselines_at": args.baselines_at,
              "steps": args.steps, "warmup": args.warmup, "examples_per_s": systems,
              "ratio_vs_best_baseline": ratio, "target": TARGET, "worker_memory": memory,
              "rss_growth": growth, "dense_on_servers_vs_workers": dense_on_servers}
    rate_rows = [[k, f"{v:,.0f}" if v else "failed",
                  f"{ours / v:.2f}x" if v and not k.startswith("tfx_dist PS") else ""]
                 for k, v in systems.items()]
    mem_rows = [[f"{r:,}", common.fmt_bytes(m["rss"]), common.fmt_bytes(m["peak_rss"])]
                for r, m in sorted(memory.items())]
    m = report["machine"]
    md = "\n".join([
        "## Parameter servers: click-through training throughput and worker memory",
        "",
        f"26 Zipf (a={ZIPF_A}) categorical features sharing one table of {args.baselines_at:,} x {DIM}, "
        f"Dense({HIDDEN}, relu), Dense(1); SGD; global batch {GLOBAL_BATCH}; 2 workers (+ 2 ps where "
        f"there are servers); {args.warmup} warm-up + {args.steps} timed steps each, one system after "
        f"the other. Run: `PYTHONPATH=. python3 benchmarks/ps_ctr.py"
        + (" --quick" if args.quick else "") + f"` ({m['date']}, load {m['loadavg_1m']:.1f} on "
        f"{m['cores']} cores: every process of a job shares those cores).",
        "",
        common.table(["system", "examples/s", "tfx_dist PS / it"], rate_rows),
        "",
        NOTE,
        "",
        f"Dense variables on the servers vs on the workers (all-reduced, the default): "
        f"x{dense_on_servers:.2f} the examples/s.",
        "",
        (f"tfx_dist PS vs the best baseline: **{ratio:.2f}x**; target >= {TARGET:.0f}x: "
         f"{common.met(ratio >= TARGET)}." if ratio else "No baseline ran."),
        "",
        "Worker resident memory (largest of the 2 tfx_dist workers) after the timed steps, by table size:",
        "",
        common.table(["table rows", "VmRSS", "peak (VmHWM)"], mem_rows),
        "",
        f"{large:,} vs {small:,} rows: RSS x{growth:.3f}; target within 10%: "
        f"{common.met(abs(growth - 1) <= 0.10)}.",
    ])
    common.write_outputs("ps_ctr", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
