"""What the timeline (TFX_TIMELINE / HOROVOD_TIMELINE) costs the cross-process all-reduce.

Runs `allreduce_multiprocess.py`'s tfx workers (2 processes on loopback,
``tf.function`` and numpy) with the timeline off and on, alternating
off/on/off/on in the same run, and reports each setting's median latency per
size (the best of its rounds) and the ratio on/off. The timeline files go to a
temporary folder and are checked to be valid JSON.

    python benchmarks/timeline_overhead.py            # writes benchmarks/results/timeline_overhead.{json,md}
    python benchmarks/timeline_overhead.py --rounds 1 --sizes 4096
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce_multiprocess as ar  # noqa: E402

RESULTS = os.path.join(ar.ROOT, "benchmarks", "results")


def run(impl: str, sizes: list[int], timeline_dir: str | None, timeout: float) -> dict:
    """Median latency (s) per size: the slowest rank's median, as allreduce_multiprocess reports."""
    old = os.environ.pop("TFX_TIMELINE", None)
    if timeline_dir:
        os.environ["TFX_TIMELINE"] = os.path.join(timeline_dir, f"{impl}_{time.monotonic_ns()}_%r.json")
    try:
        summary = ar.run_impl(impl, 2, sizes, quick=True, timeout=timeout)
    finally:
        os.environ.pop("TFX_TIMELINE", None)
        if old is not None:
            os.environ["TFX_TIMELINE"] = old
    return {str(n): summary["sizes"][str(n)]["latency_ms"] / 1e3 for n in sizes}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="4096,262144,4194304")
    parser.add_argument("--rounds", type=int, default=2, help="off/on pairs per implementation")
    parser.add_argument("--impls", nargs="+", default=["tfx_tf", "tfx_numpy"])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=os.path.join(RESULTS, "timeline_overhead.json"))
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    report = {"command": "python " + " ".join(["benchmarks/timeline_overhead.py"] + sys.argv[1:]),
              "sizes": sizes, "rounds": args.rounds, "results": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for impl in args.impls:
            rounds = {"off": [], "on": []}
            for _ in range(args.rounds):
                for setting in ("off", "on"):
                    rounds[setting].append(run(impl, sizes, tmp if setting == "on" else None, args.timeout))
            report["results"][impl] = {s: {str(n): min(r[str(n)] for r in rounds[s]) for n in sizes}
                                       for s in ("off", "on")}
        files = glob.glob(os.path.join(tmp, "*.json"))
        events = 0
        for path in files:
            with open(path) as f:
                events += len(json.load(f))
        report["timeline_files"], report["timeline_events"] = len(files), events
        report["timeline_bytes"] = sum(os.path.getsize(p) for p in files)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    md = markdown(report)
    with open(os.path.splitext(args.out)[0] + ".md", "w") as f:
        f.write(md)
    print(md)


def markdown(report: dict) -> str:
    lines = ["# Timeline overhead (cross-process all-reduce, 2 processes)", "",
             "Median latency of one float32 sum all-reduce with the timeline off and on "
             "(`TFX_TIMELINE`), alternated in one run "
             f"({report['rounds']} rounds each, best round's median per size); the timeline wrote "
             f"{report['timeline_files']} files, {report['timeline_events']} events, "
             f"{report['timeline_bytes'] / 1e6:.1f} MB, all valid JSON. The machine is shared "
             "and loaded: ratios within about 10% are noise.", "",
             "| implementation | size | off | on | on / off |", "|---|---|---|---|---|"]
    for impl, by in report["results"].items():
        for n in report["sizes"]:
            off, on = by["off"][str(n)], by["on"][str(n)]
            lines.append(f"| {ar.LABELS[impl]} | {ar._fmt_size(n)} | {off * 1e6:.0f} us | "
                         f"{on * 1e6:.0f} us | {on / off:.2f} |")
    lines += ["", f"*Command: `{report['command']}`.*", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
