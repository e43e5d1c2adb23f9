"""Horovod baseline for allreduce_multiprocess.py: `hvd.allreduce(x, op=hvd.Sum)` in a tf.function.

Runs under Horovod's own launcher, in the virtual environment that
benchmarks/setup_horovod.sh builds (TensorFlow 2.12.1, Horovod 0.28.1 with
Gloo; Horovod does not build against the project's TensorFlow), so it does
not import tfx_dist:

    build/horovod-venv/bin/horovodrun --gloo -np 2 -H localhost:2 \\
        build/horovod-venv/bin/python benchmarks/horovod_allreduce.py \\
        --sizes 4096,67108864 --quick --out /tmp/horovod.json

The measurement is allreduce_multiprocess.py's, imported from it (the same
`_time_loop`: 3 warm-up calls, then `_repeats(nbytes, quick)` timed calls of
one float32 sum all-reduce in a `tf.function`, one traced function per size),
and so is the summary (`_summarize`: each rank's median, the slowest rank's
taken; algbw = bytes / latency; busbw = algbw * 2(n-1)/n). Rank 0 gathers
every rank's times and writes the JSON: ``transport``, ``versions``,
``tf_function_floor_ms``, ``sizes`` (latency_ms, algbw_GBps, busbw_GBps,
repeats per size) and the raw ``times_s`` per rank.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from allreduce_multiprocess import _summarize, _time_loop, launcher_cpu_shares  # noqa: E402  (stdlib only at import)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", required=True, help="comma-separated byte counts")
    parser.add_argument("--quick", action="store_true", help="the repeat counts of a --quick run")
    parser.add_argument("--out", required=True, help="JSON written by rank 0")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    # Bound like the other implementations' processes (before TensorFlow
    # starts threads, which inherit it). horovodrun sets the local rank.
    if os.environ.get("TFX_BENCH_CPU_BIND", "cores") == "cores":
        shares = launcher_cpu_shares(int(os.environ["HOROVOD_LOCAL_SIZE"]))
        if shares:
            os.sched_setaffinity(0, shares[int(os.environ["HOROVOD_LOCAL_RANK"])])

    import horovod
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    out = {}
    # The floor: what any tf.function call costs in these processes.
    trivial = tf.function(lambda t: t * 2.0)
    small = tf.ones([1024], tf.float32)
    out["tf_function_floor_ms"] = statistics.median(_time_loop(lambda: trivial(small), 4096,
                                                               args.quick)) * 1e3
    for nbytes in sizes:
        step = tf.function(lambda t, n=nbytes: hvd.allreduce(t, op=hvd.Sum, name=f"bench_{n}"))
        x = tf.ones([nbytes // 4], tf.float32)
        out[str(nbytes)] = _time_loop(lambda: step(x), nbytes, args.quick)
        first = step(x).numpy()[:1]
        assert first[0] == size, first
    outs = hvd.allgather_object(out)
    if rank == 0:
        result = {"transport": "gloo",
                  "versions": {"horovod": horovod.__version__, "tensorflow": tf.__version__,
                               "python": sys.version.split()[0]},
                  "nprocs": size, "date": time.strftime("%Y-%m-%d %H:%M"),
                  "tf_function_floor_ms": max(o["tf_function_floor_ms"] for o in outs),
                  **_summarize(outs, sizes, size),
                  "times_s": [{s: o[str(s)] for s in sizes} for o in outs]}
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)
        print("horovod " + ", ".join(f"{s}: {r['latency_ms']:.3f} ms"
                                     for s, r in result["sizes"].items()), flush=True)
    hvd.shutdown()


if __name__ == "__main__":
    main()
