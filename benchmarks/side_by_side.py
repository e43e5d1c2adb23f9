"""Runs benchmarks on two checkouts of tfx_dist side by side, alternating, to show a change's effect.

    python3 benchmarks/side_by_side.py --before /path/to/old/checkout --after . \\
        --only ps_lookup multi_worker_fit --rounds 2 --out benchmarks/results/side_by_side.md

Each checkout needs its op libraries built (``python3 build_ops.py`` in it). Every benchmark runs in
its ``--quick`` form from its own checkout (its script, its ``tfx_dist``), the two checkouts one
after the other, ``--rounds`` times, so that both meet about the same machine load. The report holds
each run's own markdown section (its figures and its ratios against its baselines), in run order.
Compare the ratios (each run's tfx_dist against the TensorFlow baseline of the same run), not the
absolute figures: they move with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

# The benchmarks an architecture change must not slow: name -> script (under benchmarks/).
BENCHMARKS = {
    "allreduce_multiprocess": "allreduce_multiprocess.py",
    "multi_worker_fit": "multi_worker_fit.py",
    "ps_lookup": "ps_lookup.py",
    "ps_ctr": "ps_ctr.py",
    "hybrid_embedding": "hybrid_embedding.py",
}


def run_once(checkout: str, script: str, out_dir: str, label: str, timeout: float) -> str:
    """Runs ``script --quick`` from ``checkout``; returns its markdown section (or why there is none)."""
    out = os.path.join(out_dir, f"{label}-{os.path.splitext(script)[0]}.json")
    env = dict(os.environ, PYTHONPATH=checkout, TF_CPP_MIN_LOG_LEVEL="2")
    cmd = [sys.executable, os.path.join(checkout, "benchmarks", script), "--quick", "--out", out]
    start = time.time()
    try:
        proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"_did not finish in {timeout:.0f} s_\n"
    took = f"_{time.time() - start:.0f} s, load {os.getloadavg()[0]:.1f} after_\n\n"
    md = os.path.splitext(out)[0] + ".md"
    if proc.returncode != 0 or not os.path.exists(md):
        return took + f"_failed (exit {proc.returncode})_:\n\n```\n{proc.stderr[-2000:]}\n```\n"
    with open(md) as f:
        return took + f.read()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True, help="the old checkout (op libraries built)")
    parser.add_argument("--after", default=".", help="the new checkout (op libraries built)")
    parser.add_argument("--only", nargs="+", choices=sorted(BENCHMARKS), default=sorted(BENCHMARKS))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900, help="seconds for one benchmark run")
    parser.add_argument("--out", default=None, help="markdown report (default: stdout)")
    args = parser.parse_args()
    checkouts = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    sections = [f"# Side by side: before `{checkouts['before']}`, after `{checkouts['after']}`\n"]
    with tempfile.TemporaryDirectory() as out_dir:
        for name in args.only:
            for k in range(args.rounds):
                for label, checkout in checkouts.items():
                    print(f"== {name} round {k + 1}: {label}", flush=True)
                    text = run_once(checkout, BENCHMARKS[name], out_dir, f"{label}{k}", args.timeout)
                    sections.append(f"\n## {name}, round {k + 1}, {label}\n\n{text}")
    report = "\n".join(sections)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report)
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
