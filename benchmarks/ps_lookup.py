"""Round trip of one embedding lookup of 4096 ids on 2 parameter servers (loopback), p50 and p99.

Side by side in one run, on the same table (ROWS x 64 float32, split over 2
servers by row) and the same batches of 4096 distinct uniform ids:

* **tfx_dist**: 2 ``ps`` tasks and 1 worker of `tfx_dist.ParameterServerStrategy`;
  the worker calls the ``ShardedEmbedding`` table's lookup (the
  ``TfxPsTableLookup`` op: ids split by shard, both servers asked at once, rows
  scattered back) in a `tf.function` and eagerly, and reads the rows as numpy.
  Beside it, interleaved call by call: the previous op path (A/B) and the
  breakdown (the bare op, the C API without TensorFlow, TensorFlow's own cost
  of a call that passes the ids through).
* **TensorFlow PS, direct**: 2 ``ps`` tasks and 1 ``worker`` task as
  `tf.distribute.Server` processes; the chief builds
  `tf.distribute.ParameterServerStrategy` with a ``variable_partitioner``
  (2 shards: a `ShardedVariable`) and calls a `tf.function` doing
  ``tf.nn.embedding_lookup`` of it (the gathers run on the ps tasks, the rows
  come back to the chief over gRPC) and reads the rows as numpy; the same
  gather eagerly, interleaved with it.
* **TensorFlow PS, ClusterCoordinator**: the same gather scheduled on the
  worker with ``coordinator.schedule`` and fetched, the way a TF PS training
  loop reads rows.

The two systems run one after the other (their processes are never up at the
same time); each takes WARMUP untimed calls, then REPEATS timed ones.

tfx_dist's fixed-size table stores a row only once training updates it; until
then a lookup computes the row's initial value (a hash per value). It is timed
twice: first so (rows computed), then after one SGD step of zero gradients
over every row, which stores them all unchanged (rows stored, as TensorFlow's
variable is, initialised whole before its first gather).

    PYTHONPATH=. python3 benchmarks/ps_lookup.py [--quick] [--out results/ps_lookup.json]
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

BATCH, DIM = 4096, 64
TARGET = 10.0
NOTE = ("Each call is a round trip through 3 processes (the caller and both servers): on a loaded "
        "2-core machine each of them waits for the scheduler, which weighs on both systems alike; "
        "compare the ratio, and the load figure above.")
RESULT_TAG = "PS_LOOKUP_RESULT "
EAGER_TF_CALLS = 20


def _batches(rows: int, count: int):
    import numpy as np
    rng = np.random.default_rng(0)
    return [rng.choice(rows, BATCH, replace=False).astype("int64") for _ in range(count)]


PAGE_FAULTS: list[float] = []  # minor page faults per timed call, one entry per _timed run


def _timed(call, batches, warmup: int) -> list[float]:
    import resource
    for b in batches[:warmup]:
        call(b)
    times = []
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for b in batches[warmup:]:
        start = time.perf_counter()
        call(b)
        times.append(time.perf_counter() - start)
    PAGE_FAULTS.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / max(1, len(times)))
    return times


INTERLEAVED_FAULTS: dict[str, float] = {}  # minor page faults per timed call, per variant
# Voluntary context switches per timed call, per variant (the whole process: a thread that
# blocks, e.g. a caller handing its call to another thread and waiting for it, counts one).
INTERLEAVED_SWITCHES: dict[str, float] = {}


def _interleaved(variants: dict, batches, warmup: int) -> dict[str, list[float]]:
    """Times each variant on every batch, the variants in a fresh random order per batch."""
    import random
    import resource
    rng = random.Random(0)
    names = list(variants)
    times = {n: [] for n in names}
    faults, switches = dict.fromkeys(names, 0), dict.fromkeys(names, 0)
    for i, b in enumerate(batches):
        rng.shuffle(names)
        for n in names:
            u0 = resource.getrusage(resource.RUSAGE_SELF)
            start = time.perf_counter()
            variants[n](b)
            elapsed = time.perf_counter() - start
            if i >= warmup:
                u1 = resource.getrusage(resource.RUSAGE_SELF)
                times[n].append(elapsed)
                faults[n] += u1.ru_minflt - u0.ru_minflt
                switches[n] += u1.ru_nvcsw - u0.ru_nvcsw
    INTERLEAVED_FAULTS.update({n: faults[n] / max(1, len(times[n])) for n in names})
    INTERLEAVED_SWITCHES.update({n: switches[n] / max(1, len(times[n])) for n in names})
    return times


# --------------------------------------------------------------------------- task side

def tfx_task(args) -> None:
    import numpy as np
    import tensorflow as tf

    import tfx_dist
    strategy = tfx_dist.ParameterServerStrategy()  # a ps task serves here, then exits
    with strategy.scope():
        layer = tfx_dist.layers.ShardedEmbedding(args.rows, DIM, name="table")
        layer.build()
    table = layer.table
    lookup = tf.function(lambda ids: table.lookup(ids))
    batches = _batches(args.rows, args.warmup + args.repeats)
    computed = _timed(lambda b: np.asarray(lookup(tf.constant(b))), batches, args.warmup)
    before = np.asarray(lookup(tf.constant(batches[0])))
    _store_every_row(table, args.rows)
    # Every other variant runs interleaved: each batch goes through all of them, in a fresh
    # random order, so the machine's load changes weigh on all alike.
    native = _native_lookup(table)
    from tfx_dist import _ops
    from tfx_dist.tables import gradients as table_gradients
    bare_op = _ops.load_op_library("_ps_ops").tfx_ps_lookup

    def bare(ids):  # TfxPsLookup alone: no anchor, not differentiable
        return bare_op(ids, client_id=table._client_id, table_id=table.table_id, dim=DIM)

    def before_change(ids):  # the lookup as it was: TfxPsLookup inside tf.custom_gradient, anchor read
        return table_gradients.anchored_lookup(table.anchor, ids, bare, tf.constant([1 << 62, DIM], tf.int64))

    passthrough = tf.function(lambda ids: tf.identity(ids))
    bare_fn, before_fn = tf.function(bare), tf.function(before_change)
    variants = {
        "stored": lambda b: np.asarray(lookup(tf.constant(b))),
        # The floor: a round trip of 8 ids (no data to speak of) through the same 3 processes.
        "floor": lambda b: np.asarray(lookup(tf.constant(b[:8]))),
        # Eagerly: the same lookup outside any tf.function.
        "eager": lambda b: np.asarray(table.lookup(tf.constant(b))),
        "eager8": lambda b: np.asarray(table.lookup(tf.constant(b[:8]))),
        # The breakdown: the C API (no TensorFlow, no Python op dispatch), TensorFlow's own cost of
        # a call (a tf.function, an eager op) that only passes its ids through, the bare op.
        "c_api": native,
        "c_api8": lambda b: native(b[:8]),
        "tf_only": lambda b: np.asarray(passthrough(tf.constant(b))),
        "tf_only8": lambda b: np.asarray(passthrough(tf.constant(b[:8]))),
        "tf_eager": lambda b: np.asarray(tf.identity(tf.constant(b))),
        "bare_fn": lambda b: np.asarray(bare_fn(tf.constant(b))),
        "bare_eager": lambda b: np.asarray(bare(tf.constant(b))),
        # The previous op path, A/B in the same run.
        "before_fn": lambda b: np.asarray(before_fn(tf.constant(b))),
        "before_eager": lambda b: np.asarray(before_change(tf.constant(b))),
    }
    for name in ("stored", "eager", "bare_fn", "before_fn"):
        if not np.array_equal(np.asarray(variants[name](batches[0])), before):
            raise RuntimeError(f"variant {name} returned other rows than the lookup")
    timings = _interleaved(variants, batches, args.warmup)
    check = np.asarray(lookup(tf.constant(batches[0])))
    if not np.array_equal(check, before):
        raise RuntimeError("rows changed when stored: the zero-gradient step is not a no-op")
    print(RESULT_TAG + json.dumps({"computed": computed, **timings, "shape": list(check.shape),
                                   "page_faults_per_call": {"computed": PAGE_FAULTS[0], **INTERLEAVED_FAULTS},
                                   "switches_per_call": INTERLEAVED_SWITCHES}),
          flush=True)


def _native_lookup(table):
    """A lookup through the parameter server's C API into one reused numpy buffer."""
    import ctypes

    import numpy as np
    from tfx_dist.parameter_server import _native
    lib, checked = _native.lib(), _reused_error_buffer()
    out = np.empty((BATCH, DIM), np.float32)

    def call(ids):
        checked(lib.tfx_ps_lookup, table._client_id, table.table_id,
                ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(ids),
                out.ctypes.data_as(ctypes.POINTER(ctypes.c_float)))
        return out
    return call


def _reused_error_buffer():
    """``call(fn, *args)`` as ``parameter_server._native.call``, but with one error buffer for
    every call: the timed loop measures the lookup, not a 4 KiB allocation per call."""
    from tfx_dist import _native as native
    from tfx_dist.parameter_server import _native
    err = native.error_buffer()

    def call(fn, *args):
        code = fn(*args, err, native.ERR_LEN)
        if code != 0:
            raise _native.PS_ERRORS.error(code, err.value)
    return call


def _store_every_row(table, rows: int) -> None:
    """One SGD step of zero gradients over every row: the servers store them, values unchanged."""
    import ctypes

    import numpy as np
    from tfx_dist.parameter_server import _native
    lib = _native.lib()
    chunk = 1 << 16
    grads = np.zeros((chunk, DIM), np.float32)
    for start in range(0, rows, chunk):
        ids = np.arange(start, min(start + chunk, rows), dtype=np.int64)
        _native.call(lib.tfx_ps_push, table._client_id, table.table_id,
                     ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), len(ids),
                     grads.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 0.05)
    _native.call(lib.tfx_ps_step_done, table._client_id)


def tf_server_task(args) -> None:
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol="grpc", start=True)
    server.join()  # killed by the chief's launcher when done


def tf_chief_task(args) -> None:
    import numpy as np
    import tensorflow as tf
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    strategy = tf.distribute.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(2))
    with strategy.scope():
        table = tf.Variable(tf.random.uniform((args.rows, DIM), -0.05, 0.05, seed=1), name="table")
    shards = [v.device for v in table.variables]
    gather = tf.function(lambda ids: tf.nn.embedding_lookup(table, ids))
    batches = _batches(args.rows, args.warmup + args.repeats)
    both = _interleaved({"direct": lambda b: gather(tf.constant(b)).numpy()}, batches, args.warmup)
    # The same gather eagerly: far slower (a first try of 320 calls on 1M rows did not end in
    # 400 s at load 9), so it gets EAGER_TF_CALLS calls after 2 untimed ones.
    both["eager"] = _timed(lambda b: tf.nn.embedding_lookup(table, tf.constant(b)).numpy(),
                           batches[:2 + EAGER_TF_CALLS], 2)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)

    @tf.function
    def scheduled(ids):
        return tf.nn.embedding_lookup(table, ids)

    def via_worker(b):
        return coordinator.schedule(scheduled, args=(tf.constant(b),)).fetch()

    coord = _timed(via_worker, batches, args.warmup)
    check = np.asarray(gather(tf.constant(batches[0])))
    print(RESULT_TAG + json.dumps({"direct": both["direct"], "eager": both["eager"], "coordinator": coord,
                                   "switches_per_call": dict(INTERLEAVED_SWITCHES), "shards": shards,
                                   "shape": list(check.shape)}), flush=True)


# --------------------------------------------------------------------------- launcher side

_SECRET = os.environ.get("TFX_JOB_SECRET") or os.urandom(16).hex()  # one per launcher run


def _start(role: str, tf_config: dict, args) -> subprocess.Popen:
    env = dict(os.environ, TF_CONFIG=json.dumps(tf_config), TF_CPP_MIN_LOG_LEVEL="2",
               TFX_JOB_SECRET=_SECRET,
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    cmd = [sys.executable, os.path.abspath(__file__), "--role", role, "--rows", str(args.rows),
           "--repeats", str(args.repeats), "--warmup", str(args.warmup)]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def run_tfx(args) -> dict:
    ports = common.free_ports(3)
    cluster = {"worker": [f"127.0.0.1:{ports[0]}"], "ps": [f"127.0.0.1:{p}" for p in ports[1:]]}
    servers = [_start("tfx", {"cluster": cluster, "task": {"type": "ps", "index": i}}, args)
               for i in range(2)]
    worker = _start("tfx", {"cluster": cluster, "task": {"type": "worker", "index": 0}}, args)
    try:
        result = common.result_of(worker, "the tfx_dist worker", args.timeout, RESULT_TAG)
        for i, s in enumerate(servers):
            s.wait(timeout=60)  # they exit 0 once the worker has said goodbye
            if s.returncode != 0:
                raise RuntimeError(f"tfx_dist ps {i} exited {s.returncode}: {s.stdout.read()[-2000:]}")
        return result
    finally:
        for p in servers + [worker]:
            if p.poll() is None:
                p.kill()


def run_tf(args) -> dict:
    ports = common.free_ports(4)
    cluster = {"chief": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{ports[1]}"],
               "ps": [f"127.0.0.1:{p}" for p in ports[2:]]}
    servers = [_start("tf-server", {"cluster": cluster, "task": {"type": t, "index": i}}, args)
               for t, i in (("worker", 0), ("ps", 0), ("ps", 1))]
    chief = _start("tf-chief", {"cluster": cluster, "task": {"type": "chief", "index": 0}}, args)
    try:
        return common.result_of(chief, "TensorFlow's PS chief", args.timeout, RESULT_TAG)
    finally:
        for p in servers + [chief]:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)


def _stats(times: list[float]) -> dict:
    import numpy as np
    ms = np.asarray(times) * 1e3
    return {"p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean()), "calls": len(times)}


def _memcpy_ms() -> float:
    import numpy as np
    src, dst = np.ones(BATCH * DIM, np.float32), np.empty(BATCH * DIM, np.float32)
    times = []
    for _ in range(200):
        start = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - start)
    return float(np.percentile(times, 50) * 1e3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", default=None)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=400)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=None)
    parser.add_argument("--skip-tf", action="store_true",
                        help="time tfx_dist only (quick A/B of tfx_dist changes; writes no results)")
    args = parser.parse_args()
    if args.role:
        {"tfx": tfx_task, "tf-server": tf_server_task, "tf-chief": tf_chief_task}[args.role](args)
        return
    if args.quick:
        args.rows, args.repeats, args.warmup = 100_000, 30, 5
    tfx = run_tfx(args)
    if args.skip_tf:
        for name, key in (("rows stored", "stored"), ("rows computed", "computed"), ("8 ids", "floor"),
                          ("eager lookup", "eager"), ("eager lookup 8 ids", "eager8"),
                          ("C API, rows stored", "c_api"), ("C API, 8 ids", "c_api8"),
                          ("tf.function passing ids through", "tf_only"),
                          ("tf.function passing 8 ids through", "tf_only8"), ("eager tf.identity", "tf_eager"),
                          ("bare TfxPsLookup in tf.function", "bare_fn"), ("bare TfxPsLookup eager", "bare_eager"),
                          ("previous path in tf.function", "before_fn"), ("previous path eager", "before_eager")):
            s = _stats(tfx[key])
            print(f"tfx_dist {name}: p50 {s['p50_ms']:.3f} ms, p99 {s['p99_ms']:.3f} ms ({s['calls']} calls)")
        print("worker's minor page faults per call:", tfx["page_faults_per_call"])
        print("worker's voluntary context switches per call:", tfx["switches_per_call"])
        print(f"load {os.getloadavg()}")
        return
    tf_res = run_tf(args)
    fn_key, eager_key = "tfx_dist PS, tf.function, rows stored", "tfx_dist PS, eager, rows stored"
    sources = {fn_key: (tfx, "stored"), eager_key: (tfx, "eager"),
               "tfx_dist PS, tf.function, rows computed (never written)": (tfx, "computed"),
               "tfx_dist PS, tf.function, 8 ids (round-trip floor)": (tfx, "floor"),
               "tfx_dist PS, eager, 8 ids": (tfx, "eager8"),
               "before: TfxPsLookup in tf.custom_gradient + anchor read, tf.function": (tfx, "before_fn"),
               "before: the same, eager": (tfx, "before_eager"),
               "breakdown: bare TfxPsLookup op (no anchor, no gradient), tf.function": (tfx, "bare_fn"),
               "breakdown: bare TfxPsLookup op, eager": (tfx, "bare_eager"),
               "breakdown: C API lookup, rows stored (no TensorFlow)": (tfx, "c_api"),
               "breakdown: C API lookup, 8 ids": (tfx, "c_api8"),
               "breakdown: tf.function passing 4096 ids through (no lookup)": (tfx, "tf_only"),
               "breakdown: tf.function passing 8 ids through (no lookup)": (tfx, "tf_only8"),
               "breakdown: eager tf.identity of 4096 ids (no lookup)": (tfx, "tf_eager"),
               "TF PS, tf.function on the chief": (tf_res, "direct"),
               "TF PS, eager embedding_lookup on the chief": (tf_res, "eager"),
               "TF PS, ClusterCoordinator.schedule + fetch": (tf_res, "coordinator")}
    systems = {}
    for name, (res, key) in sources.items():
        systems[name] = _stats(res[key])
        systems[name]["switches_per_call"] = res.get("switches_per_call", {}).get(key)
    tf_rows = {k: v for k, v in systems.items() if k.startswith("TF")}
    best_tf_name = min(tf_rows, key=lambda k: tf_rows[k]["p50_ms"])
    best_tf = tf_rows[best_tf_name]["p50_ms"]
    best_tf99 = min(v["p99_ms"] for v in tf_rows.values())
    ours, eager = systems[fn_key], systems[eager_key]
    ratio50, ratio99 = best_tf / ours["p50_ms"], best_tf99 / ours["p99_ms"]
    eager50, eager99 = best_tf / eager["p50_ms"], best_tf99 / eager["p99_ms"]
    # What a lookup through TensorFlow cannot go below: TensorFlow's own call (passing the ids
    # through, same call shape) plus the data path (the C API's round trip), paid one after the other.
    fn_floor = _stats(tfx["tf_only"])["p50_ms"] + _stats(tfx["c_api"])["p50_ms"]
    eager_floor = _stats(tfx["tf_eager"])["p50_ms"] + _stats(tfx["c_api"])["p50_ms"]
    memcpy_ms = _memcpy_ms()
    # What any lookup of these rows through TensorFlow pays on this machine, however fast its data
    # path: TensorFlow's own call, a round trip through the 3 processes with no data (8 ids), and
    # the rows copied twice (a server into the transport, the worker out of it). Gathering 4096
    # scattered rows on the servers comes on top.
    round_trip = _stats(tfx["c_api8"])["p50_ms"] + 2 * memcpy_ms
    machine_floor = {"tf_function": _stats(tfx["tf_only"])["p50_ms"] + round_trip,
                     "eager": _stats(tfx["tf_eager"])["p50_ms"] + round_trip}
    budget = best_tf / TARGET
    report = {"machine": common.machine_info(), "memcpy_1mib_ms": memcpy_ms, "rows": args.rows, "dim": DIM,
              "batch": BATCH, "systems": systems, "tf_shard_devices": tf_res["shards"], "ratio_p50": ratio50,
              "ratio_p99": ratio99, "ratio_eager_p50": eager50, "ratio_eager_p99": eager99,
              "floor_tf_function_ms": fn_floor, "floor_eager_ms": eager_floor, "best_tf": best_tf_name,
              "machine_floor_ms": machine_floor, "target_budget_ms": budget,
              "target": TARGET, "page_faults_per_call": tfx["page_faults_per_call"]}
    rows = [[name, f"{s['p50_ms']:.2f}", f"{s['p99_ms']:.2f}", s["calls"],
             "" if s["switches_per_call"] is None else f"{s['switches_per_call']:.1f}"]
            for name, s in systems.items()]
    md = "\n".join([
        "## Parameter servers: round trip of one lookup (4096 ids x 64 floats, 2 servers, loopback)",
        "",
        f"Table {args.rows:,} rows x {DIM} float32 split over 2 servers; each call looks up 4096 "
        "distinct uniform ids and returns the rows to the caller as numpy. TensorFlow's table is a "
        "`ShardedVariable` (`variable_partitioner`, 2 shards: "
        f"{', '.join(tf_res['shards'])}). Run: `PYTHONPATH=. python3 benchmarks/ps_lookup.py`"
        + (" --quick" if args.quick else "") + f" ({common.machine_info()['date']}, load "
        f"{report['machine']['loadavg_1m']:.1f} on {report['machine']['cores']} cores).",
        "",
        common.table(["system", "p50 ms", "p99 ms", "calls", "caller's voluntary switches / call"], rows),
        "",
        NOTE,
        "",
        "tfx_dist's rows are `table.lookup(ids)` of a `ShardedEmbedding`'s table (one `TfxPsTableLookup` "
        "op, differentiable through the table's anchor), called in a `tf.function` and eagerly; every row "
        "but *rows computed* ran interleaved (each batch through all of them, in a random order). The "
        "*before* rows are the previous op path (the bare `TfxPsLookup` inside `tf.custom_gradient` with "
        "a read of the anchor), A/B in the same run. The breakdown rows split a call: the bare op, the "
        "lookup through the parameter server's C API from Python (no TensorFlow: routing, both servers' "
        "round trips, the rows scattered into a reused buffer), 8 ids that way (the bare round trip "
        "through the 3 processes), and TensorFlow's own cost of a call that only passes the ids through "
        "(which the TensorFlow rows pay too). The last column counts the calling process's voluntary "
        "context switches per call (a thread blocking: a `tf.function` call hands its work to "
        "TensorFlow's thread pool and waits, an eager op runs on the caller; the C API's caller "
        "sleeps when the servers' replies take more than its 50 us spin). "
        "Worker's minor page faults per call (rows stored): "
        f"{tfx['page_faults_per_call'].get('stored', float('nan')):.1f} in a `tf.function`, "
        f"{tfx['page_faults_per_call'].get('eager', float('nan')):.1f} eagerly.",
        "",
        f"Moving the rows themselves is not the cost: one 1 MiB memcpy takes {memcpy_ms:.3f} ms "
        "on this machine (p50 of 200).",
        "",
        f"The floor of a lookup through TensorFlow in this run (TensorFlow's own call passing the ids "
        f"through + the C API's round trip, p50): {fn_floor:.2f} ms in a `tf.function`, "
        f"{eager_floor:.2f} ms eagerly; 10x the best TensorFlow PS path ({best_tf_name}, "
        f"{best_tf:.2f} ms) needs {budget:.2f} ms.",
        "",
        "This machine's floor for any lookup of these rows through TensorFlow, whatever its data path "
        "(TensorFlow's own call passing the ids through + a round trip of 8 ids through the same 3 "
        "processes + the 1 MiB of rows copied twice, into the transport and out of it; the servers' "
        f"gathers of 4096 scattered rows come on top), p50: {machine_floor['tf_function']:.2f} ms in a "
        f"`tf.function`, {machine_floor['eager']:.2f} ms eagerly, against the {budget:.2f} ms that 10x "
        "needs: " + ("10x is below this floor in both." if min(machine_floor.values()) > budget else
                     "in a `tf.function` 10x is below it." if machine_floor["tf_function"] > budget else
                     "10x is above it."),
        "",
        f"tfx_dist in a `tf.function` (rows stored) vs the best TensorFlow PS path: **{ratio50:.1f}x** lower "
        f"p50, **{ratio99:.1f}x** lower p99; eagerly: **{eager50:.1f}x** (p50), **{eager99:.1f}x** (p99). "
        f"Target >= {TARGET:.0f}x: {common.met(ratio50 >= TARGET)} / {common.met(ratio99 >= TARGET)} "
        f"(tf.function, p50 / p99), {common.met(eager50 >= TARGET)} / {common.met(eager99 >= TARGET)} "
        "(eager, p50 / p99).",
    ])
    common.write_outputs("ps_lookup", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
