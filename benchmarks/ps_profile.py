"""Where one worker's step goes in the click-through benchmark's real PS job.

Runs `ps_ctr.py`'s tfx_dist job (2 ps + 2 workers, Keras fit), or its
no-communication ceiling's local processes, with worker (process) 0's
timed steps traced by TensorFlow's profiler, then reads the trace (XSpace
protobuf) and splits each step's wall time into:

* our ops: ``TfxPsTableLookup`` (rows from the servers; in synchronous training it
  waits until the previous step is applied, so it includes waiting for the
  other worker), ``TfxPsPush`` (gradient rows to them), ``TfxPsStepDone``
  (closes the step: a round trip that never waits for the other worker, but
  the last worker's also applies the step's summed gradients on the servers),
  the collective ops (``TfxAllReduce``...: the dense gradients);
* the model's math (MatMul, the embedding's unique/gather/segment ops, ...),
  by op type;
* what no op covers: Keras's and TensorFlow's per-step work in Python and
  the executor between ops (and, on a loaded machine, waiting for a core);
* the tf.data input pipeline, which runs beside the step on background
  threads (it costs cores, not step latency).

Ops run concurrently on TensorFlow's threads, so per-type times are the
union of their intervals (not a sum over threads), and "no op running" is the
step's span minus the union of all ops.

    PYTHONPATH=. python3 benchmarks/ps_profile.py [--system ps|ps-dense|local-2|local-1] [--steps 10]
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import ps_ctr  # noqa: E402

OUR_OPS = ("TfxPsTableLookup", "TfxPsLookup", "TfxPsPush", "TfxPsStepDone", "TfxAllReduce", "TfxAllGather",
           "TfxBroadcast", "TfxFusedReduce")


def _union(intervals) -> int:
    total, end = 0, None
    for a, b in sorted(intervals):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


INPUT_PIPELINE = "tf.data input pipeline (background threads)"


def _op_type(name: str) -> str | None:
    """The op type of a host trace event named ``node:OpType`` (None: not an op); the input
    pipeline's iterator events (``Iterator::...``) as one type."""
    if name.startswith("Iterator::"):
        return INPUT_PIPELINE
    if ":" not in name or "::" in name or name.startswith("__inference"):
        return None
    op = name.rsplit(":", 1)[1]
    return op if op and (op[0].isupper() or op[0] == "_") and op.isidentifier() else None


def summarize(trace_file: str, spans: list[list[int]]) -> dict:
    """Per-op-type time (union, ms per step) within the traced steps' spans."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2
    space = xplane_pb2.XSpace()
    with open(trace_file, "rb") as f:
        space.ParseFromString(f.read())
    # Event times are relative to the profile's start (a stat of the "Task Environment" plane).
    start_ns = 0
    for plane in space.planes:
        for stat in plane.stats:
            if plane.stat_metadata[stat.metadata_id].name == "profile_start_time":
                start_ns = stat.int64_value or stat.uint64_value
    by_type: dict[str, list] = {}
    for plane in space.planes:
        if not plane.name.startswith("/host:CPU"):
            continue
        names = {k: m.name for k, m in plane.event_metadata.items()}
        for line in plane.lines:
            base = start_ns + line.timestamp_ns
            for ev in line.events:
                op = _op_type(names.get(ev.metadata_id, ""))
                if op is None:
                    continue
                start = base + ev.offset_ps // 1000
                by_type.setdefault(op, []).append((start, start + ev.duration_ps // 1000))
    steps = len(spans)
    wall = sum(b - a for a, b in spans)

    def within(intervals):
        return [(max(a, s0), min(b, s1)) for a, b in intervals for s0, s1 in spans
                if a < s1 and b > s0]

    per_type = {op: _union(within(iv)) / steps / 1e6 for op, iv in by_type.items()}
    any_op = _union(within([i for op, iv in by_type.items() if op != INPUT_PIPELINE
                            for i in iv])) / steps / 1e6
    return {"step_ms": wall / steps / 1e6, "any_op_ms": any_op, "no_op_ms": wall / steps / 1e6 - any_op,
            "ops_ms": dict(sorted(per_type.items(), key=lambda kv: -kv[1]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--system", default="ps", choices=("ps", "ps-dense", "local-2", "local-1"),
                        help="the PS job (dense variables on the workers or the servers), or the "
                             "no-communication ceiling's local processes (2 or 1)")
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("--keep", default=None, help="folder to keep the trace in")
    args = parser.parse_args()
    folder = args.keep or tempfile.mkdtemp(prefix="ps_profile_")
    os.environ["PS_CTR_PROFILE"] = folder
    if args.system.startswith("local"):
        results = ps_ctr._run_local(args, args.rows, int(args.system[-1]))
        rate = ps_ctr._local_rate(results)
    else:
        role = {"ps": "tfx-ps", "ps-dense": "tfx-ps-dense"}[args.system]
        results = ps_ctr._run_job(args, args.rows, role, server_role=role)
        rate = ps_ctr._rate(results)
    traces = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    if not traces:
        raise SystemExit(f"no trace written under {folder}")
    with open(os.path.join(folder, "steps.json")) as f:
        spans = json.load(f)
    report = summarize(max(traces, key=os.path.getmtime), spans)
    report["examples_per_s_while_traced"] = rate
    print(json.dumps(report, indent=1))
    print(f"step {report['step_ms']:.1f} ms: some op of the step running {report['any_op_ms']:.1f} ms, "
          f"none {report['no_op_ms']:.1f} ms (Keras/TF per-step work, waiting for a core)")
    for op, ms in report["ops_ms"].items():
        if ms >= 0.2 or op in OUR_OPS:
            print(f"  {op:28s} {ms:7.1f} ms" + ("  (ours)" if op in OUR_OPS else ""))


if __name__ == "__main__":
    main()
