"""HybridStrategy vs MultiWorkerMirroredStrategy + keras.layers.Embedding: one big table.

    python benchmarks/hybrid_embedding.py [--quick] [--out benchmarks/results/hybrid_embedding.json]

For each table size (100K, 1M, 10M rows of 16 floats) and each system, the
driver starts 2 workers under ``tfx-dist-run -n 2`` running the same click
model (one one-hot id through the table, 4 ids of a multi-hot feature through
it too, a 2-layer MLP, Adagrad, global batch 1024 of power-law ids):

* ``hybrid``: `tfx_dist.HybridStrategy`, the table a `ShardedEmbedding`
  sharded over the 2 workers (each holds half the rows, in its embedding store);
* ``baseline``: `tfx_dist.MultiWorkerMirroredStrategy` with
  `keras.layers.Embedding` (the whole table and its Adagrad slot on every
  worker; Keras's optimizer updates them densely). Skipped at 10M rows (its
  ~1.3 GB of table and slot per worker, updated whole every step, does not
  finish in this benchmark's budget on 2 cores).

Each worker times ``--steps`` training steps after 5 warm-up steps
(examples/s of the whole job = global batch x steps / seconds) and reports its
resident memory (VmRSS) after training. Also run alone by run_all.py.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GLOBAL_BATCH, DIM, WARMUP = 1024, 16, 5


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1)) / 1024


def worker(system: str, rows: int, steps: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    import tfx_dist

    rng = np.random.default_rng(0)
    n = GLOBAL_BATCH * (steps + WARMUP)
    ids = (np.minimum(rng.zipf(1.2, (n, 5)) - 1, rows - 1) * 2_654_435_761 % rows).astype(np.int64)
    y = (ids[:, :1] % 3 == 0).astype(np.float32)
    rss_before = _rss_mib()
    if system == "hybrid":
        strategy = tfx_dist.HybridStrategy()
        table = lambda: tfx_dist.layers.ShardedEmbedding(rows, DIM, combiner="mean",  # noqa: E731
                                                         placement="sharded")
    else:
        strategy = tfx_dist.MultiWorkerMirroredStrategy()

        def table():
            embedding = keras.layers.Embedding(rows, DIM)
            return lambda x: keras.ops.mean(embedding(x), axis=1)
    with strategy.scope():
        inputs = keras.Input((5,), dtype="int64")
        x = table()(inputs)
        x = keras.layers.Dense(64, activation="relu")(x)
        out = keras.layers.Dense(1, activation="sigmoid")(x)
        model = keras.Model(inputs, out)
        model.compile(keras.optimizers.Adagrad(0.05), "binary_crossentropy")
    data = tf.data.Dataset.from_tensor_slices((ids, y)).batch(GLOBAL_BATCH).repeat()
    model.fit(data, steps_per_epoch=WARMUP, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    print("RESULT " + json.dumps({
        "rank": strategy.cluster_info.rank, "examples_per_s": GLOBAL_BATCH * steps / seconds,
        "rss_mib": _rss_mib(), "rss_before_mib": rss_before,
        "table_mib": rows * DIM * 4 / 2**20}), flush=True)


def run_job(system: str, rows: int, steps: int, timeout: float) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "tfx_dist.run", "-n", "2", "--timeout", str(int(timeout)), "--",
           sys.executable, os.path.abspath(__file__), "--worker", system, "--rows", str(rows),
           "--steps", str(steps)]
    try:
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in proc.stdout.splitlines()
               if "RESULT " in line]
    if proc.returncode != 0 or len(results) != 2:
        return {"error": f"exit {proc.returncode}: {(proc.stdout + proc.stderr)[-800:]}"}
    return {"examples_per_s": min(r["examples_per_s"] for r in results),
            "rss_mib": [round(r["rss_mib"]) for r in sorted(results, key=lambda r: r["rank"])],
            "table_mib": results[0]["table_mib"]}


def markdown(result: dict) -> str:
    lines = ["## HybridStrategy: sharded embedding table vs mirrored keras.layers.Embedding", "",
             f"2 workers on one host, global batch {GLOBAL_BATCH}, table of dim {DIM} (float32), "
             "Adagrad; examples/s of the job (the slower worker's timing), resident memory of "
             "each worker after training (VmRSS, MiB: TensorFlow's own ~0.5-1 GB included). "
             f"Rerun: `{result['command']}`.", "",
             "| rows | table MiB | HybridStrategy ex/s | baseline ex/s | speed-up | "
             "hybrid RSS per worker | baseline RSS per worker |", "|---|---|---|---|---|---|---|"]
    for rows, by_system in result["results"].items():
        h, b = by_system.get("hybrid", {}), by_system.get("baseline", {})

        def cell(r, key):
            if "error" in r:
                return "failed"
            if key not in r:
                return "skipped"
            v = r[key]
            return f"{v:,.0f}" if isinstance(v, float) else " / ".join(map(str, v))

        speed = (f"{h['examples_per_s'] / b['examples_per_s']:.1f}x"
                 if "examples_per_s" in h and "examples_per_s" in b else "-")
        mib = h.get("table_mib") or b.get("table_mib") or 0
        lines.append(f"| {int(rows):,} | {mib:,.0f} | {cell(h, 'examples_per_s')} | "
                     f"{cell(b, 'examples_per_s')} | {speed} | {cell(h, 'rss_mib')} | "
                     f"{cell(b, 'rss_mib')} |")
    errors = [f"- {rows} {s}: {r['error']}" for rows, d in result["results"].items()
              for s, r in d.items() if "error" in r]
    return "\n".join(lines + ([""] + errors if errors else [])) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=("hybrid", "baseline"))
    parser.add_argument("--rows", type=int)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--baseline-max-rows", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeout", type=float, default=400)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "hybrid_embedding.json"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rows, args.steps)
        return
    sizes = [100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    steps = 10 if args.quick else args.steps
    result = {"command": "python benchmarks/hybrid_embedding.py " + " ".join(
        a for a in sys.argv[1:] if not a.startswith("--out")), "steps": steps, "results": {}}
    for rows in sizes:
        result["results"][str(rows)] = {}
        for system in ("hybrid", "baseline"):
            if system == "baseline" and rows > args.baseline_max_rows:
                result["results"][str(rows)][system] = {"skipped": True}
                continue
            r = run_job(system, rows, steps, args.timeout)
            print(rows, system, r, flush=True)
            result["results"][str(rows)][system] = r
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
