"""Where the Horovod Keras script's step time goes on tfx_dist (the fit's target: 1.5x Horovod's).

Runs benchmarks/horovod_fit_script.py unchanged under ``tfx-dist-run -n 2``
(FIT_BENCH_IMPL=tfx), each rank through a wrapper that, once ``fit`` is done,
reads its communicator's counters: collectives run, all-reduce buckets and the
tensors in them (grouping/fusion), bytes, and the time summed over collectives
from submission until the rank could run them (``waiting_s``: negotiation and
the slower rank's arrival) and running them (``running_s``: the data path).
Per step: divided by the steps fit ran (epochs x examples / batch). Next to
it, the same script with no communication (FIT_BENCH_IMPL=none, 2 independent
processes on the same CPU shares) in the same run, so that the step time
beyond the machine's ceiling can be set against what the runtime accounts for.

    python benchmarks/horovod_fit_profile.py            # writes benchmarks/results/horovod_fit_profile.{json,md}
    python benchmarks/horovod_fit_profile.py --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import horovod_compare as hc  # noqa: E402

ROOT = hc.ROOT
WRAPPER = """
import json, os, runpy, sys
sys.argv = [{script!r}]
ns = runpy.run_path({script!r}, run_name="__main__")
import tfx_dist.horovod as hvd
stats = hvd.basics.communicator().stats()
print("PROFILE " + json.dumps({{"rank": hvd.rank(), "stats": stats, "epoch_s": ns["times"]}}), flush=True)
"""


def profile_tfx(epochs: int, timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONHOME", "VIRTUAL_ENV", "TF_CONFIG")}
    env.update(PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_CPU_ALLOCATOR_USE_BFC="true",
               FIT_BENCH_IMPL="tfx", FIT_BENCH_EPOCHS=str(epochs))
    cmd = [sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, "-c",
           WRAPPER.format(script=hc.FIT_SCRIPT)]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    ranks = [json.loads(line.split("PROFILE ", 1)[1]) for line in proc.stdout.splitlines() if "PROFILE " in line]
    if proc.returncode != 0 or len(ranks) != 2:
        raise RuntimeError(f"profile run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    return {"ranks": sorted(ranks, key=lambda r: r["rank"])}


def markdown(report: dict) -> str:
    rows, ceil_step_ms = report["ranks"], report["ceiling_step_ms"]
    load0, load1, load2 = report["load"]
    lines = ["# Where the fit step goes (tfx_dist.horovod, tfx-dist-run -n 2)", "",
             f"{report['date']}. `benchmarks/horovod_fit_script.py` ({report['epochs']} epochs, {report['steps']} steps per rank; "
             f"every count below over all of them, so epoch 1's tracing and the callbacks' collectives are in "
             f"it), then the no-communication ceiling (2 independent processes) right after. 1-minute load "
             f"average before, between, after: {load0:.1f}, {load1:.1f}, {load2:.1f} (the machine is shared: "
             "times are noisy).", "",
             "| rank | step (median epoch / steps) | ceiling step | collectives / step | all-reduce buckets / step | "
             "tensors / bucket | bytes / step | waiting / step | running / step |", "|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['rank']} | {row['step_ms']:.2f} ms | {ceil_step_ms:.2f} ms | "
                     f"{row['collectives_per_step']:.2f} | {row['allreduce_buckets_per_step']:.2f} | "
                     f"{row['tensors_per_bucket']:.2f} | {row['allreduce_bytes_per_step'] / 1e6:.2f} MB | "
                     f"{row['waiting_ms_per_step']:.2f} ms | {row['running_ms_per_step']:.2f} ms |")
    beyond = max(r["step_ms"] for r in rows) - ceil_step_ms
    comm = max(r["waiting_ms_per_step"] + r["running_ms_per_step"] for r in rows)
    lines += ["", f"Every step is one fused all-reduce of all {rows[0]['tensors_per_bucket']:.0f} gradient tensors "
                    "(grouping and fusion leave nothing to merge; the other ~0.1 collectives per step, by count, "
                    "are outside the train step: the callbacks' broadcast at the start and metric averages at "
                    "each epoch's end). The step is "
                    f"{beyond:.2f} ms above the no-communication ceiling; the runtime accounts for up to "
                    f"{comm:.2f} ms per step (waiting, which includes the slower rank's lag, plus running) on the "
                    "rank that waits most (more than the gap: time a rank waits for the other one's compute "
                    "under this load is in it).", "", f"*Command: `{report['command']}`.*", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=os.path.join(hc.RESULTS, "horovod_fit_profile.json"))
    parser.add_argument("--markdown-only", action="store_true", help="rewrite the .md from the .json")
    args = parser.parse_args()
    if args.markdown_only:
        return common.rewrite_markdown("horovod_fit_profile", args.out, markdown)
    examples = int(os.environ.get("FIT_BENCH_EXAMPLES", "8192"))
    batch = int(os.environ.get("FIT_BENCH_BATCH", "64"))
    steps_per_epoch = -(-examples // batch)
    steps = steps_per_epoch * args.epochs
    load0 = os.getloadavg()[0]
    tfx = profile_tfx(args.epochs, args.timeout)
    load1 = os.getloadavg()[0]
    ceiling = hc.ceiling_once("none_tf221_x2", hc.ar.DEFAULT_HOROVOD_VENV, args.epochs, args.timeout)
    load2 = os.getloadavg()[0]
    ceil_step_ms = 1e3 * examples / (ceiling["examples_per_s"] / 2)  # per process: its examples / its rate
    ceil_step_ms /= steps_per_epoch
    rows = []
    for r in tfx["ranks"]:
        s = r["stats"]
        later = r["epoch_s"][1:] or r["epoch_s"]
        step_ms = 1e3 * sorted(later)[len(later) // 2] / steps_per_epoch
        rows.append({"rank": r["rank"], "step_ms": step_ms, "collectives_per_step": s["collectives"] / steps,
                     "allreduce_buckets_per_step": s["allreduce_buckets"] / steps,
                     "tensors_per_bucket": s["allreduce_tensors"] / max(1, s["allreduce_buckets"]),
                     "allreduce_bytes_per_step": s["allreduce_bytes"] / steps,
                     "waiting_ms_per_step": 1e3 * s["waiting_s"] / steps,
                     "running_ms_per_step": 1e3 * s["running_s"] / steps})
    report = {"command": "python " + " ".join(["benchmarks/horovod_fit_profile.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "epochs": args.epochs,
              "steps": steps, "ceiling_step_ms": ceil_step_ms, "ceiling_examples_per_s": ceiling["examples_per_s"],
              "ranks": rows, "load": [load0, load1, load2]}
    md = markdown(report)
    common.write_outputs("horovod_fit_profile", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
