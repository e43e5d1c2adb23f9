"""All-reduce across the logical devices of one process: tfx_dist.FusedAllReduce vs TensorFlow's.

Every system reduces the same per-replica gradient lists, side by side and
interleaved in ONE process, through the public CrossDeviceOps API inside a
``tf.function``::

    cross_device_ops.batch_reduce(ReduceOp.SUM, [(per_replica, per_replica), ...])

Systems: ``baseline`` (the same tf.function returning identities of its
inputs: the cost of the call and of the per-replica tensors, subtracted from
the others), TensorFlow's ``ReductionToOneDevice`` and
``HierarchicalCopyAllReduce``, and ``tfx_dist.FusedAllReduce``. No strategy
is built, so no collective keys can collide.

Gradient lists: the seeds' model (Dense 784->256->128->10: 3 kernels and 3
biases, float32), 4 MiB and 64 MiB lists of 100 float32 tensors, over 2 and 4
logical CPU devices. The machine's memory bandwidth is probed with numpy in
the same rounds (see `common.BandwidthProbe`); the bound for one reduction of
S bytes over N devices is (N + 1) * S bytes (N inputs read, 1 output written)
at that bandwidth. For the largest list, plain C loops over numpy arrays of
the same sizes (``native_loops.py``) show what the memory system allows with
no TensorFlow at all: reading the inputs once, and the same one-pass sum.

    python benchmarks/local_allreduce.py            # full
    python benchmarks/local_allreduce.py --quick    # smoke run
    python benchmarks/local_allreduce.py --diagnose-only --intra-op-threads 1
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import common  # noqa: E402
from common import MIB  # noqa: E402

MAX_DEVICES = 4
SYSTEMS = ("baseline", "tf_r2od", "tf_hcar", "tfx_fused")
LABELS = {"baseline": "baseline (identity)", "tf_r2od": "TF ReductionToOneDevice",
          "tf_hcar": "TF HierarchicalCopyAllReduce", "tfx_fused": "tfx_dist FusedAllReduce"}
TF_SYSTEMS = ("tf_r2od", "tf_hcar")


def gradient_lists(quick: bool) -> dict[str, list[tuple[int, ...]]]:
    """name -> shapes of a float32 gradient list."""
    seeds = [(784, 256), (256,), (256, 128), (128,), (128, 10), (10,)]

    def hundred(total_bytes: int) -> list[tuple[int, ...]]:
        n = total_bytes // 4
        base, extra = divmod(n, 100)
        return [(base + (1 if i < extra else 0),) for i in range(100)]

    lists = {"seeds model (6 tensors)": seeds, "64 MiB (100 tensors)": hundred(64 * MIB)}
    if not quick:
        lists = {"seeds model (6 tensors)": seeds, "4 MiB (100 tensors)": hundred(4 * MIB),
                 "64 MiB (100 tensors)": hundred(64 * MIB)}
    return lists


def nbytes_of(shapes) -> int:
    total = 0
    for s in shapes:
        n = 1
        for d in s:
            n *= d
        total += 4 * n
    return total


def setup_tf(intra_op_threads: int | None):
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * MAX_DEVICES)
    if intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(intra_op_threads)
    return tf


def make_inputs(tf, shapes, devices):
    """Device d holds the list filled with d + 1 (so the sum over N is N(N+1)/2)."""
    per_device = []
    for d, device in enumerate(devices):
        with tf.device(device):
            per_device.append([tf.fill(s, float(d + 1)) for s in shapes])
    return per_device


def _depends_on(tf, outputs):
    """One scalar that reads an element of every output (on its device), so that
    nothing can be pruned, without returning (and copying) the outputs."""
    firsts = []
    for o in outputs:
        with tf.device(o.device):
            firsts.append(tf.reshape(o, [-1])[:1])
    return tf.add_n(firsts)


def _step_function(tf, body, variables=None):
    """``body(flat)`` as a tf.function: of its arguments, or, with ``variables``
    (device-major list of lists), of their values read on their own devices."""
    if variables is None:
        return tf.function(lambda *flat: body(flat))

    def read_all():
        flat = []
        for per_device in variables:
            with tf.device(per_device[0].device):
                flat += [v.read_value() for v in per_device]
        return flat

    return tf.function(lambda: body(read_all()))


def make_step(tf, cross_device_ops, num_devices: int, num_tensors: int, variables=None,
              return_outputs: bool = True):
    """A tf.function running one batch_reduce (None ops: identities, the baseline).

    With ``variables`` (device-major list of lists), the per-replica values are
    read inside the function on their own devices, as gradients are produced in
    a training step, and the function returns one scalar that depends on every
    output. Otherwise the function takes the tensors as arguments and returns
    every output: TensorFlow then copies each argument and output on another
    logical CPU device than the function's (a real memcpy), which costs more
    than the reduction itself at 64 MiB (see `--inputs args`).
    """
    from tensorflow.python.distribute import values as values_lib

    def body(flat):
        per_replica = [values_lib.PerReplica([flat[d * num_tensors + k] for d in range(num_devices)])
                       for k in range(num_tensors)]
        if cross_device_ops is None:
            out = []
            for d in range(num_devices):
                with tf.device(per_replica[0].values[d].device):
                    out += [tf.identity(p.values[d]) for p in per_replica]
        else:
            reduced = cross_device_ops.batch_reduce(tf.distribute.ReduceOp.SUM,
                                                    [(p, p) for p in per_replica])
            out = [v for m in reduced for v in m.values]
        if return_outputs:
            return out
        return _depends_on(tf, out)

    return _step_function(tf, body, variables)


DIRECT = "direct op (no CrossDeviceOps)"
# Plain C loops over numpy arrays of the same sizes (benchmarks/native_loops.py):
# what the memory system allows, with no TensorFlow around it. Timed whole.
C_READ = "C loop: read the N inputs once, nothing else"
C_SUM = "C loop: the same sum in one pass, streaming stores"
C_LOOPS = (C_READ, C_SUM)
# The direct op's own baseline: its function reads one device's results, not every device's.
DIRECT_BASELINE = "baseline for the direct op (identity, device 0 only)"


def make_direct_step(tf, num_devices, num_tensors, device, variables=None,
                     return_outputs=True, reduce=True):
    """The bare TfxFusedReduce op in a tf.function (no CrossDeviceOps, no broadcast);
    ``reduce=False``: identities of device 0's list instead (its baseline)."""
    from tfx_dist import fused_reduce

    def body(flat):
        per_device = [list(flat[d * num_tensors:(d + 1) * num_tensors]) for d in range(num_devices)]
        with tf.device(device):
            out = (fused_reduce(per_device, "sum") if reduce
                   else [tf.identity(t) for t in per_device[0]])
        if return_outputs:
            return out
        return _depends_on(tf, out)

    return _step_function(tf, body, variables)


def build_systems(tf, extra_fused: dict | None = None):
    import tfx_dist

    systems = {"baseline": None, "tf_r2od": tf.distribute.ReductionToOneDevice(),
               "tf_hcar": tf.distribute.HierarchicalCopyAllReduce(),
               "tfx_fused": tfx_dist.FusedAllReduce()}
    for name, bucket in (extra_fused or {}).items():
        systems[name] = tfx_dist.FusedAllReduce(bucket_bytes=bucket)
    return systems


def check(tf, name, outputs, num_devices, shapes):
    if name == "baseline" or name.startswith("bw "):
        return
    expected = num_devices * (num_devices + 1) / 2
    for t in (outputs[0], outputs[-1]):
        got = float(tf.reshape(t, [-1])[0])
        if got != expected:
            raise AssertionError(f"{name}: got {got}, expected {expected}")
    if not name.startswith("direct"):
        assert len(outputs) == num_devices * len(shapes), (name, len(outputs))


def native_loop_calls(tf, num_devices: int, num_elements: int) -> dict:
    """The C loops on N float32 arrays of `num_elements`, on as many threads as
    TensorFlow's intra-op pool; none where no C compiler is found."""
    import numpy as np
    from native_loops import NativeLoops

    loops = NativeLoops.load()
    if loops is None:
        print("no C compiler found: the C-loop rows are left out", flush=True)
        return {}
    threads = tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count() or 1
    arrays = [np.full(num_elements, d + 1, np.float32) for d in range(num_devices)]
    out = np.empty(num_elements, np.float32)
    loops.sum_stream(arrays, out, threads)
    assert out[0] == out[-1] == num_devices * (num_devices + 1) / 2, out[[0, -1]]
    return {C_READ: lambda: loops.read_once(arrays, threads),
            C_SUM: lambda: loops.sum_stream(arrays, out, threads)}


def time_case(tf, systems, shapes, devices, rounds, inner, probe=None, direct=False,
              inputs_mode="vars"):
    """Seconds per call of every system on one list over `devices`, interleaved."""
    n = len(devices)
    inputs = make_inputs(tf, shapes, devices)
    flat = [t for per in inputs for t in per]
    variables = None
    if inputs_mode == "vars":
        variables = []
        for device, per_device in zip(devices, inputs):
            with tf.device(device):
                variables.append([tf.Variable(t, trainable=False) for t in per_device])
        flat = []
    calls = {}
    for name, ops in systems.items():
        step = make_step(tf, ops, n, len(shapes), variables, return_outputs=False)
        calls[name] = (lambda step=step: step(*flat))
        # Correctness, with every output returned.
        check(tf, name, make_step(tf, ops, n, len(shapes), variables)(*flat), n, shapes)
    if direct:
        dstep = make_direct_step(tf, n, len(shapes), devices[0], variables, return_outputs=False)
        calls[DIRECT] = lambda: dstep(*flat)
        dbase = make_direct_step(tf, n, len(shapes), devices[0], variables, return_outputs=False,
                                 reduce=False)
        calls[DIRECT_BASELINE] = lambda: dbase(*flat)
        check(tf, "direct", make_direct_step(tf, n, len(shapes), devices[0], variables)(*flat), n,
              shapes)
    moved = {}
    if probe is not None:
        calls.update(native_loop_calls(tf, n, nbytes_of(shapes) // 4))  # float32
        for name, (fn, nbytes) in probe.callables().items():
            calls["bw " + name] = fn
            moved["bw " + name] = nbytes
    times = common.interleave(calls, rounds=rounds, inner=inner, warmup=3)
    bw = {name[3:]: moved[name] / common.median(t) / 1e9 for name, t in times.items()
          if name in moved}
    return {name: t for name, t in times.items() if name not in moved}, bw


def summarize(times: dict, nbytes: int, n: int, limit_gbps: float,
              rounds_gbps: float | None = None) -> dict:
    """Medians, ratios and the bound at `limit_gbps`; with `rounds_gbps` (the best
    bandwidth seen in this case's own rounds), the bound at that too."""
    base = common.median(times["baseline"])
    traffic = (n + 1) * nbytes
    bound_s = traffic / (limit_gbps * 1e9)
    rows = {}
    for name, t in times.items():
        med = common.median(t)
        q1, q3 = common.spread(t)
        if name in C_LOOPS:  # timed whole
            own_base = 0.0
        elif name == DIRECT and DIRECT_BASELINE in times:
            # The direct op hands results to one device: it is measured against its own baseline.
            own_base = common.median(times[DIRECT_BASELINE])
        else:
            own_base = base
        over = max(med - own_base, 1e-9)
        is_base = name.startswith("baseline")
        rows[name] = {"median_ms": med * 1e3, "q1_ms": q1 * 1e3, "q3_ms": q3 * 1e3,
                      "over_baseline_ms": (med - own_base) * 1e3, "calls": len(t),
                      # The read-only loop moves the N inputs only.
                      "GBps": (n * nbytes if name == C_READ else traffic) / over / 1e9
                      if not is_base else None,
                      "x_bound": over / bound_s if not is_base else None}
    tf_best = min((s for s in TF_SYSTEMS if s in rows), key=lambda s: rows[s]["over_baseline_ms"])
    for name, r in rows.items():
        if not name.startswith("baseline"):
            r["tf_best_over_this"] = rows[tf_best]["over_baseline_ms"] / max(
                r["over_baseline_ms"], 1e-6)
    case = {"bytes": nbytes, "traffic_bytes": traffic, "bound_ms": bound_s * 1e3,
            "tf_best": tf_best, "systems": rows}
    if rounds_gbps:
        case["rounds_limit_GBps"] = rounds_gbps
        case["rounds_bound_ms"] = traffic / (rounds_gbps * 1e9) * 1e3
    return case


def run(args) -> dict:
    tf = setup_tf(args.intra_op_threads)
    import keras  # noqa: F401  (version for the report)

    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    lists = gradient_lists(args.quick)
    probe = common.BandwidthProbe(128 * MIB)
    report = {"machine": common.machine_info(), "quick": args.quick, "inputs": args.inputs,
              "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads(),
              "fused_reduce_isa": common.fused_reduce_isa(),
              "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads(),
              "fusion_bucket_bytes_env": os.environ.get("TFX_LOCAL_FUSION_BYTES"),
              "cpu_allocator": "bfc" if os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower()
              in ("1", "true") else "default",
              "bandwidth_runs": [], "cases": {}, "diagnostics": {}}
    report["bandwidth_runs"].append(probe.measure(repeats=3 if args.quick else 5))
    big = max(lists, key=lambda k: nbytes_of(lists[k]))
    raw = {}
    if not args.diagnose_only:
        systems = build_systems(tf)
        for n in args.devices:
            for name, shapes in lists.items():
                nbytes = nbytes_of(shapes)
                is_big = name == big
                rounds = (5 if args.quick else 12) if is_big else (8 if args.quick else 20)
                inner = 2 if is_big else (10 if args.quick else 20)
                if is_big:  # TF's HierarchicalCopyAllReduce takes ~1 s here: one call a round
                    inner = {k: 1 if k == "tf_hcar" else (2 if args.quick else 3)
                             for k in list(systems) + [DIRECT, DIRECT_BASELINE]}
                times, bw = time_case(tf, systems, shapes, devices[:n], rounds, inner,
                                      probe=probe if is_big else None, direct=True,
                                      inputs_mode=args.inputs)
                if bw:
                    report["bandwidth_runs"].append(bw)
                raw[(n, name)] = (times, nbytes, bw)
                med = {k: f"{common.median(v) * 1e3:.2f}" for k, v in times.items()}
                print(f"{n} devices, {name}: median ms {med}", flush=True)
    if args.diagnose or args.diagnose_only:
        # Why the fused op takes what it takes on the big list over 4 devices:
        # bucket size, and the bare op without CrossDeviceOps around it.
        buckets = {f"tfx_fused bucket {common.fmt_bytes(b)}": b
                   for b in (256 << 10, 1 * MIB, 16 * MIB, 64 * MIB)}
        systems = build_systems(tf, buckets)
        del systems["tf_hcar"]  # far slower than the rest, and not what we compare against here
        for n in (args.devices if args.diagnose_only else [max(args.devices)]):
            times, bw = time_case(tf, systems, lists[big], devices[:n],
                                  rounds=5 if args.quick else 12, inner=2, probe=probe,
                                  direct=True, inputs_mode=args.inputs)
            report["bandwidth_runs"].append(bw)
            raw[("diag", n, big)] = (times, nbytes_of(lists[big]), bw)
    report["bandwidth_runs"].append(probe.measure(repeats=3 if args.quick else 5))
    probe.close()
    report["bandwidth"] = common.bandwidth_summary(report["bandwidth_runs"])
    limit = report["bandwidth"]["limit_GBps"]
    for key, (times, nbytes, bw) in raw.items():
        n = key[1] if key[0] == "diag" else key[0]
        case = summarize(times, nbytes, n, limit, max(bw.values()) if bw else None)
        if key[0] == "diag":
            report["diagnostics"][f"{key[1]} devices, {key[2]}"] = case
        else:
            report["cases"].setdefault(str(key[0]), {})[key[1]] = case
    report["targets"] = targets(report, big)
    return report


def targets(report: dict, big: str) -> dict:
    cases = report["cases"]
    if not cases:
        return {}
    never_slower = []
    for n, by_list in cases.items():
        for name, case in by_list.items():
            r, b = case["systems"]["tfx_fused"], case["systems"][case["tf_best"]]
            ours, best = r["over_baseline_ms"], b["over_baseline_ms"]
            # "within noise": our median call is slower but inside TF's best's IQR.
            never_slower.append({"devices": int(n), "list": name, "ours_ms": ours,
                                 "tf_best_ms": best, "ok": ours <= best,
                                 "within_noise": ours > best and r["median_ms"] <= b["q3_ms"]})
    out = {"never_slower_than_tf_best": {"ok": all(c["ok"] for c in never_slower),
                                         "cases": never_slower}}
    if "4" in cases and big in cases["4"]:
        case = cases["4"][big]
        r = case["systems"]["tfx_fused"]
        out["4dev_64MiB_1.5x_faster_than_tf_best"] = {
            "ok": r["tf_best_over_this"] >= 1.5, "speedup": r["tf_best_over_this"]}
        out["4dev_64MiB_within_1.5x_of_bandwidth_bound"] = {
            "ok": r["x_bound"] <= 1.5, "x_bound": r["x_bound"], "bound_ms": case["bound_ms"],
            "ours_over_baseline_ms": r["over_baseline_ms"],
            **{key: case["systems"][name]["median_ms"] for key, name in
               (("c_sum_ms", C_SUM), ("c_read_ms", C_READ)) if name in case["systems"]},
            **({"rounds_bound_ms": case["rounds_bound_ms"],
                "rounds_limit_GBps": case["rounds_limit_GBps"]} if "rounds_bound_ms" in case else {})}
    return out


def _case_table(case: dict) -> str:
    rows = []
    for name, r in case["systems"].items():
        label = LABELS.get(name, name)
        if name == case["tf_best"]:
            label += " (TF best)"
        if name.startswith("baseline"):
            rows.append([label, f"{r['median_ms']:.2f} ({r['q1_ms']:.2f}-{r['q3_ms']:.2f})",
                         "-", "-", "-", "-"])
            continue
        rows.append([label, f"{r['median_ms']:.2f} ({r['q1_ms']:.2f}-{r['q3_ms']:.2f})",
                     f"{r['over_baseline_ms']:.2f}", f"{r['tf_best_over_this']:.2f}x",
                     f"{r['GBps']:.2f}", f"{r['x_bound']:.2f}x"])
    return common.table(["system", "median ms (IQR)", "over baseline ms",
                         "speed-up vs TF best", "GB/s (traffic/over-baseline)",
                         "time / bandwidth bound"], rows)


def markdown(report: dict) -> str:
    bw = report["bandwidth"]
    m = report["machine"]
    probes = ", ".join(f"{k} {v:.1f}" for k, v in sorted(bw["probes_GBps"].items()))
    if not report["cases"]:  # --diagnose-only: a short section beside the main one
        lines = [f"## All-reduce diagnostics, TF intra-op threads = "
                 f"{report['intra_op_threads'] or 'default'}, CPU allocator "
                 f"{report.get('cpu_allocator', 'default')}", "",
                 f"Same method as the main all-reduce section, in its own process. Memory "
                 f"bandwidth limit measured in this run: {bw['limit_GBps']:.1f} GB/s "
                 f"(`{bw['limit_probe']}`).", ""]
        for title, case in report["diagnostics"].items():
            lines += [f"### {title}, bound {case['bound_ms']:.2f} ms", "", _case_table(case), ""]
        return "\n".join(lines)
    # Recomputed so that a re-render (run_all.py --render-only) uses today's rules.
    first = next(iter(report["cases"].values()))
    report["targets"] = targets(report, max(first, key=lambda k: first[k]["bytes"]))
    lines = ["## All-reduce across logical CPU devices of one process", "",
             "Every system reduces the same per-replica float32 lists with "
             "`cross_device_ops.batch_reduce(ReduceOp.SUM, [(per_replica, per_replica), ...])` in a "
             "`tf.function`, interleaved in one process (random order per round); times are "
             "medians per call after warm-up (IQR in brackets). "
             + ("The per-replica values are read inside the function from variables on their own "
                "devices (as gradients are made inside a training step) and the function returns "
                "one scalar that reads an element of every output: passing 4 x 64 MiB as arguments "
                "and returning every output instead costs 22-36 ms of copies between logical CPU "
                "devices per call here (TensorFlow copies arguments and outputs that live on "
                "another device than the function's), more than the reduction itself "
                "(`--inputs args` measures that way). " if report.get("inputs") == "vars" else
                "The per-replica tensors are passed as arguments and every output is returned. ")
             + "*baseline* is the same `tf.function` with identities in place of the reduction; "
             "*over baseline* subtracts it. The *direct op* row hands its results to device 0 "
             "only, so its function reads N times fewer outputs: it is measured over its own "
             "baseline (identities of device 0's values), not the common one. "
             "The *C loop* rows (largest list only) run plain C loops "
             "(`benchmarks/native/stream_loops.c`, on as many threads as TF's intra-op pool) over "
             "numpy arrays of the same sizes, timed whole: reading the N inputs once and "
             "nothing else (no reduction can take less), and the same sum in one pass with "
             "streaming stores, as our kernel does it. "
             "*traffic* = (N + 1) x list bytes (N inputs read, 1 output written; N x for the "
             "read-only loop); "
             "*GB/s* = traffic / over-baseline time; *time / bandwidth bound* = over-baseline time "
             "/ (traffic / memory bandwidth).", "",
             f"Memory bandwidth measured in the same run with numpy on 128 MiB float32 arrays, "
             f"interleaved with the 64 MiB rounds (best median per probe, GB/s, bytes read + "
             f"written): {probes}. Limit used: **{bw['limit_GBps']:.1f} GB/s** "
             f"(`{bw['limit_probe']}`). TF intra-op threads: {report['intra_op_threads'] or 'default'} "
             f"(0 = one per core); TfxFusedReduce's CPU passes: "
             f"{report.get('fused_reduce_isa', 'not recorded')}; load average at start "
             f"{m['loadavg_1m']:.1f} on {m['cores']} cores.", ""]
    for n, by_list in report["cases"].items():
        for name, case in by_list.items():
            lines += [f"### {n} devices, {name}: {common.fmt_bytes(case['bytes'])}, "
                      f"bound {case['bound_ms']:.2f} ms", "", _case_table(case), ""]
    t = report.get("targets", {})
    if t:
        lines += ["### Targets", ""]
        ns = t["never_slower_than_tf_best"]
        bad = [f"{c['devices']} devices / {c['list']} ({c['ours_ms']:.2f} vs {c['tf_best_ms']:.2f} ms"
               + (", within noise" if c.get("within_noise") else "") + ")"
               for c in ns["cases"] if not c["ok"]]
        lines.append(f"- Never slower than TF's best (over baseline, medians) at any size: "
                     f"{common.met(ns['ok'])}" + (f"; slower at {', '.join(bad)}" if bad else ""))
        if "4dev_64MiB_1.5x_faster_than_tf_best" in t:
            s = t["4dev_64MiB_1.5x_faster_than_tf_best"]
            b = t["4dev_64MiB_within_1.5x_of_bandwidth_bound"]
            lines.append(f"- 4 devices, 64 MiB, at least 1.5x faster than TF's best: "
                         f"{common.met(s['ok'])} ({s['speedup']:.2f}x)")
            lines.append(f"- 4 devices, 64 MiB, within 1.5x of the memory-bandwidth bound: "
                         f"{common.met(b['ok'])} ({b['ours_over_baseline_ms']:.2f} ms over baseline "
                         f"vs bound {b['bound_ms']:.2f} ms = {b['x_bound']:.2f}x)"
                         + (f"; with no TensorFlow at all, the same sum as a plain C loop took "
                            f"{b['c_sum_ms']:.2f} ms and reading the inputs alone "
                            f"{b['c_read_ms']:.2f} ms" if "c_sum_ms" in b else "")
                         + (f". The bound is taken at the best bandwidth of the whole run; at the "
                            f"best seen in this case's own rounds ({b['rounds_limit_GBps']:.1f} GB/s) "
                            f"it is {b['rounds_bound_ms']:.2f} ms, and ours "
                            f"{b['ours_over_baseline_ms'] / b['rounds_bound_ms']:.2f}x that"
                            if "rounds_bound_ms" in b else ""))
        lines.append("")
    for title, case in report["diagnostics"].items():
        lines += [f"### Diagnostics ({title}; intra-op threads "
                  f"{report['intra_op_threads'] or 'default'})", "",
                  "Bucket sizes passed to `FusedAllReduce(bucket_bytes=...)` (the CPU kernel uses "
                  "one thread per 8 MiB of memory traffic and clamps the bucket to between "
                  "256 KiB and total/(16 x those threads)), and the bare "
                  "`tfx_dist.fused_reduce` op without CrossDeviceOps around it.", "",
                  _case_table(case), ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--devices", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--intra-op-threads", type=int, default=None)
    parser.add_argument("--diagnose", action="store_true",
                        help="also sweep bucket sizes on the largest list")
    parser.add_argument("--diagnose-only", action="store_true")
    parser.add_argument("--inputs", choices=["vars", "args"], default="vars",
                        help="vars: per-replica values read from variables on their devices inside "
                             "the tf.function, one scalar returned (what a training step pays); "
                             "args: tensors passed as arguments and every output returned")
    parser.add_argument("--out", default=None, help="JSON path (markdown beside it)")
    parser.add_argument("--bfc-allocator", action="store_true",
                        help="TF_CPU_ALLOCATOR_USE_BFC=true: TensorFlow's caching CPU allocator, so "
                             "that outputs reuse memory instead of faulting in fresh pages")
    args = parser.parse_args()
    if args.bfc_allocator:
        os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"  # before TensorFlow starts
    report = run(args)
    md = markdown(report)
    name = "local_allreduce" + ("_diag" if args.diagnose_only else "") + (
        "_args" if args.inputs == "args" else "") + ("_bfc" if args.bfc_allocator else "") + (
        f"_t{args.intra_op_threads}" if args.intra_op_threads else "")
    out, md_path = common.write_outputs(name, report, md, args.out)
    print(md)
    print(f"wrote {out} and {md_path}")


if __name__ == "__main__":
    main()
