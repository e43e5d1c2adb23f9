"""HybridStrategy vs MultiWorkerMirroredStrategy + keras.layers.Embedding: a click model of 4 tables.

    python benchmarks/hybrid_embedding.py [--quick] [--out benchmarks/results/hybrid_embedding.json]

For each size of the big table (100K, 1M, 10M rows of 16 floats) and each
system, the driver starts 2 workers under ``tfx-dist-run -n 2`` running the
same click model: one one-hot id and 4 ids of a multi-hot feature through the
big table, one id through each of 3 small tables (10K rows), a 2-layer MLP,
Adagrad, global batch 1024 of power-law ids:

* ``hybrid``: `tfx_dist.HybridStrategy`, every table a `ShardedEmbedding`
  sharded over the 2 workers (each holds half the rows, in its embedding
  store); the 4 tables' gradient rows travel in one pair of all-to-alls per
  step (``TFX_ALLTOALL_FUSION``, the default), and the runtime fuses the
  tables' forward exchanges (two per table) that are ready in the same cycle;
* ``hybrid_unfused``: the same with ``TFX_ALLTOALL_FUSION=0`` (every
  all-to-all alone: a pair per table forward and backward), to measure what
  fusing gains;
* ``hybrid_ps``: the same model under ``tfx-dist-run -n 2 --ps 2``: the tables
  live on 2 parameter servers instead (they also report their peak resident
  memory, VmHWM, when they exit);
* ``baseline``: `tfx_dist.MultiWorkerMirroredStrategy` with
  `keras.layers.Embedding` (every table and its Adagrad slot whole on every
  worker; Keras's optimizer updates them densely), up to
  ``--baseline-max-rows``.

Each worker times ``--steps`` training steps after 5 warm-up steps
(examples/s of the whole job = global batch x steps / seconds) and reports its
resident memory (VmRSS) after training. The renderer draws examples/s against
table rows as an SVG (``hybrid_embedding.svg`` beside the results, no plotting
library). Also run alone by run_all.py.
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
SMALL_TABLES, SMALL_ROWS = 3, 10_000
SYSTEMS = ("hybrid", "hybrid_unfused", "hybrid_ps", "baseline")
LABELS = {"hybrid": "HybridStrategy", "hybrid_unfused": "HybridStrategy, all-to-alls unfused",
          "hybrid_ps": "HybridStrategy, 2 workers + 2 ps", "baseline": "baseline (MWMS + Embedding)"}


def _rss_mib(field: str = "VmRSS") -> float:
    with open("/proc/self/status") as f:
        return int(re.search(field + r":\s+(\d+)", f.read()).group(1)) / 1024


def _report_server_memory_at_exit() -> None:
    """On a ps task (which serves inside HybridStrategy() and exits): its resident memory at
    exit and at its peak (VmHWM), as a SERVER line the driver reads."""
    import atexit

    def report():
        rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        print("SERVER " + json.dumps({"rank": rank, "rss_mib": _rss_mib(),
                                      "peak_rss_mib": _rss_mib("VmHWM")}), flush=True)

    atexit.register(report)


def worker(system: str, rows: int, steps: int) -> None:
    import keras
    import numpy as np
    import tensorflow as tf

    import tfx_dist

    rng = np.random.default_rng(0)
    n = GLOBAL_BATCH * (steps + WARMUP)
    ids = (np.minimum(rng.zipf(1.2, (n, 5)) - 1, rows - 1) * 2_654_435_761 % rows).astype(np.int64)
    small = (np.minimum(rng.zipf(1.2, (n, SMALL_TABLES)) - 1, SMALL_ROWS - 1)).astype(np.int64)
    y = ((ids[:, :1] + small[:, :1]) % 3 == 0).astype(np.float32)
    rss_before = _rss_mib()
    if system.startswith("hybrid"):
        if json.loads(os.environ["TF_CONFIG"])["task"]["type"] == "ps":
            _report_server_memory_at_exit()
        strategy = tfx_dist.HybridStrategy()

        def table(size, combiner):
            return tfx_dist.layers.ShardedEmbedding(size, DIM, combiner=combiner, placement="sharded")
    else:
        strategy = tfx_dist.MultiWorkerMirroredStrategy()

        def table(size, combiner):
            embedding = keras.layers.Embedding(size, DIM)
            reduce = keras.ops.mean if combiner == "mean" else keras.ops.sum
            return lambda x: reduce(embedding(x), axis=1)
    with strategy.scope():
        big_ids = keras.Input((5,), dtype="int64")
        small_ids = [keras.Input((1,), dtype="int64") for _ in range(SMALL_TABLES)]
        x = keras.layers.Concatenate()([table(rows, "mean")(big_ids)]
                                       + [table(SMALL_ROWS, "sum")(i) for i in small_ids])
        x = keras.layers.Dense(64, activation="relu")(x)
        out = keras.layers.Dense(1, activation="sigmoid")(x)
        model = keras.Model([big_ids] + small_ids, out)
        model.compile(keras.optimizers.Adagrad(0.05), "binary_crossentropy")
    features = tuple([ids] + [small[:, i:i + 1] for i in range(SMALL_TABLES)])
    data = tf.data.Dataset.from_tensor_slices((features, y)).batch(GLOBAL_BATCH).repeat()
    model.fit(data, steps_per_epoch=WARMUP, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0)
    seconds = time.perf_counter() - start
    rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    print("RESULT " + json.dumps({
        "rank": rank, "examples_per_s": GLOBAL_BATCH * steps / seconds,
        "rss_mib": _rss_mib(), "rss_before_mib": rss_before,
        "table_mib": rows * DIM * 4 / 2**20}), flush=True)


def run_job(system: str, rows: int, steps: int, timeout: float) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    if system == "hybrid_unfused":
        env["TFX_ALLTOALL_FUSION"] = "0"
    ps = ["--ps", "2"] if system == "hybrid_ps" else []
    cmd = [sys.executable, "-m", "tfx_dist.run", "-n", "2", *ps, "--timeout", str(int(timeout)), "--",
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
    out = {"examples_per_s": min(r["examples_per_s"] for r in results),
           "rss_mib": [round(r["rss_mib"]) for r in sorted(results, key=lambda r: r["rank"])],
           "table_mib": results[0]["table_mib"]}
    servers = sorted((json.loads(line.split("SERVER ", 1)[1]) for line in proc.stdout.splitlines()
                      if "SERVER " in line), key=lambda r: r["rank"])
    if ps:
        if len(servers) != 2:
            return {"error": f"{len(servers)} of 2 servers reported memory: "
                             f"{(proc.stdout + proc.stderr)[-800:]}"}
        out["server_peak_rss_mib"] = [round(r["peak_rss_mib"]) for r in servers]
    return out


def _median_run(runs: list) -> dict:
    """The run of median examples/s (one run: itself), with every run's examples/s beside it."""
    ok = sorted((r for r in runs if "examples_per_s" in r), key=lambda r: r["examples_per_s"])
    if not ok:
        return runs[0]
    out = dict(ok[(len(ok) - 1) // 2])
    if len(runs) > 1:
        out["examples_per_s_runs"] = [round(r.get("examples_per_s", 0)) for r in runs]
    return out


def _cell(r: dict, key: str) -> str:
    if "error" in r:
        return "failed"
    if key not in r:
        return "skipped"
    v = r[key]
    return f"{v:,.0f}" if isinstance(v, float) else " / ".join(map(str, v))


def _ratio(a: dict, b: dict) -> str:
    if "examples_per_s" in a and "examples_per_s" in b:
        return f"{a['examples_per_s'] / b['examples_per_s']:.2f}x"
    return "-"


def svg(result: dict) -> str:
    """Examples/s against rows of the big table, one group of bars per size (no plotting library)."""
    sizes = list(result["results"])
    systems = [s for s in SYSTEMS if s != "hybrid_unfused"]
    colors = {"hybrid": "#1f77b4", "hybrid_ps": "#2ca02c", "baseline": "#d62728"}
    values = {(rows, s): result["results"][rows].get(s, {}).get("examples_per_s") for rows in sizes
              for s in systems}
    top = max([v for v in values.values() if v] + [1.0])
    step = 10 ** len(str(int(top / 5))) / 10 * 5 if top > 50 else 10
    top = step * (int(top // step) + 1)
    width, height, left, bottom, plot_h = 640, 340, 70, 50, 240
    group = (width - left - 20) / max(1, len(sizes))
    bar = group * 0.8 / len(systems)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="16" text-anchor="middle" font-size="14">'
           'Training examples/s vs rows of the big table (2 workers)</text>']
    y0 = height - bottom
    tick = 0.0
    while tick <= top:
        y = y0 - tick / top * plot_h
        out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{tick:,.0f}</text>')
        tick += step
    for gi, rows in enumerate(sizes):
        x = left + gi * group + group * 0.1
        for si, system in enumerate(systems):
            v = values[(rows, system)]
            bx = x + si * bar
            if v:
                h = v / top * plot_h
                out.append(f'<rect x="{bx:.1f}" y="{y0 - h:.1f}" width="{bar - 2:.1f}" height="{h:.1f}" '
                           f'fill="{colors[system]}"><title>{LABELS[system]}: {v:,.0f}</title></rect>')
            else:
                out.append(f'<text x="{bx + bar / 2:.1f}" y="{y0 - 4}" text-anchor="middle" '
                           'font-size="10">n/a</text>')
        out.append(f'<text x="{left + gi * group + group / 2:.1f}" y="{y0 + 18}" '
                   f'text-anchor="middle">{int(rows):,} rows</text>')
    out.append(f'<line x1="{left}" x2="{width - 20}" y1="{y0}" y2="{y0}" stroke="black"/>')
    for si, system in enumerate(systems):
        lx = left + si * 190
        out.append(f'<rect x="{lx}" y="{height - 18}" width="12" height="12" fill="{colors[system]}"/>')
        out.append(f'<text x="{lx + 16}" y="{height - 8}">{LABELS[system]}</text>')
    return "\n".join(out + ["</svg>"]) + "\n"


def markdown(result: dict) -> str:
    lines = ["## HybridStrategy: sharded embedding tables vs mirrored keras.layers.Embedding", "",
             f"2 workers on one host (and 2 workers + 2 parameter servers), global batch {GLOBAL_BATCH}, "
             f"a big table of dim {DIM} (float32) fed 5 ids per example and {SMALL_TABLES} tables of "
             f"{SMALL_ROWS:,} rows fed one id each, Adagrad; examples/s of the job (the slower "
             "worker's timing), resident memory of each worker after training (VmRSS, MiB: "
             "TensorFlow's own ~0.5-1 GB included), and of each parameter server at its peak "
             "(VmHWM). Per step the hybrid runs 2 all-to-alls per table forward, fused across "
             "tables by the runtime when ready in the same cycle, and 2 for all tables backward; "
             "unfused (`TFX_ALLTOALL_FUSION=0`): every all-to-all alone, 2 per table backward "
             "too (8 + 8 here, against 2 to 8 + 1 to 2 fused). With `--repeat N` the two hybrid "
             "columns are the median of N alternated runs (every run listed below the table). "
             f"Rerun: `{result['command']}`.", "",
             "| rows | table MiB | Hybrid ex/s | Hybrid unfused ex/s | fused / unfused | "
             "Hybrid 2w+2ps ex/s | baseline ex/s | Hybrid / baseline | Hybrid RSS per worker | "
             "2w+2ps RSS per worker | 2w+2ps peak RSS per server | baseline RSS per worker |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for rows, by_system in result["results"].items():
        h, u, p, b = (by_system.get(s, {}) for s in SYSTEMS)
        mib = h.get("table_mib") or b.get("table_mib") or 0
        lines.append(f"| {int(rows):,} | {mib:,.0f} | {_cell(h, 'examples_per_s')} | "
                     f"{_cell(u, 'examples_per_s')} | {_ratio(h, u)} | {_cell(p, 'examples_per_s')} | "
                     f"{_cell(b, 'examples_per_s')} | {_ratio(h, b)} | {_cell(h, 'rss_mib')} | "
                     f"{_cell(p, 'rss_mib')} | {_cell(p, 'server_peak_rss_mib')} | "
                     f"{_cell(b, 'rss_mib')} |")
    repeats = [f"- {int(rows):,} rows, {LABELS[s]}: {', '.join(f'{v:,}' for v in r['examples_per_s_runs'])} ex/s"
               for rows, d in result["results"].items() for s, r in d.items()
               if "examples_per_s_runs" in r]
    lines += ["", "Every run (ex/s, in run order):", ""] + repeats if repeats else []
    errors = [f"- {rows} {s}: {r['error']}" for rows, d in result["results"].items()
              for s, r in d.items() if "error" in r]
    lines += [""] + errors if errors else []
    lines += ["", "![examples/s vs table rows](benchmarks/results/hybrid_embedding.svg)"]
    if result.get("load_average"):
        lines += ["", f"Load average (1, 5, 15 min) at the start: {result['load_average'][0]}; "
                      f"at the end: {result['load_average'][1]}."]
    if result.get("reading"):
        lines += ["", result["reading"]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", choices=SYSTEMS)
    parser.add_argument("--rows", type=int)
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--sizes", default="100000,1000000,10000000")
    parser.add_argument("--baseline-max-rows", type=int, default=10_000_000)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of hybrid and hybrid_unfused per size, alternated; their "
                             "median is reported (the fused/unfused ratio is within noise otherwise)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--out", default=os.path.join(HERE, "results", "hybrid_embedding.json"))
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.rows, args.steps)
        return
    sizes = [100_000] if args.quick else [int(s) for s in args.sizes.split(",")]
    steps = 10 if args.quick else args.steps
    shown = [a for i, a in enumerate(sys.argv[1:]) if not a.startswith("--out")
             and not (i > 0 and sys.argv[i] == "--out")]  # sys.argv[i]: the argument before
    result = {"command": " ".join(["python benchmarks/hybrid_embedding.py"] + shown),
              "steps": steps, "results": {},
        "load_average": [" ".join(open("/proc/loadavg").read().split()[:3])]}
    systems = args.systems.split(",")
    repeated = [s for s in systems if s in ("hybrid", "hybrid_unfused")]
    for rows in sizes:
        result["results"][str(rows)] = {}
        runs = {s: [] for s in systems}
        # Alternated rounds (fused, unfused, fused, ...): the machine's load drifts.
        order = [s for _ in range(max(1, args.repeat)) for s in repeated]
        order += [s for s in systems if s not in repeated]
        for system in order:
            if system == "baseline" and rows > args.baseline_max_rows:
                result["results"][str(rows)][system] = {"skipped": True}
                continue
            t0 = time.time()
            r = run_job(system, rows, steps, args.timeout)
            r["wall_s"] = round(time.time() - t0)
            print(rows, system, r, flush=True)
            runs[system].append(r)
        for system, rs in runs.items():
            if rs:
                result["results"][str(rows)][system] = _median_run(rs)
    result["load_average"].append(" ".join(open("/proc/loadavg").read().split()[:3]))
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    base = os.path.splitext(args.out)[0]
    with open(base + ".svg", "w") as f:
        f.write(svg(result))
    with open(base + ".md", "w") as f:
        f.write(markdown(result))
    print(markdown(result))


if __name__ == "__main__":
    main()
