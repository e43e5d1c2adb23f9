"""Plots cross-process all-reduce algbw vs payload size from allreduce_multiprocess.json.

    python benchmarks/plot_allreduce.py [--json benchmarks/results/allreduce_multiprocess.json]
                                        [--png benchmarks/results/allreduce_algbw.png]

One line per (system, process count: tfx_dist, TF's MultiWorkerMirroredStrategy
and, when it ran, Horovod), log-log, with horizontal lines for the
loopback TCP (one stream, one way) and memcpy limits measured in the same run,
when the JSON has them.
"""

from __future__ import annotations

import argparse
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
LABELS = {"tfx_tf": "tfx (tf.function)", "tfx_numpy": "tfx (numpy)", "tf_mwms": "TF MWMS RING",
          "horovod": "Horovod (TF 2.12)"}
COLORS = {"tfx_tf": "tab:blue", "tfx_numpy": "tab:green", "tf_mwms": "tab:red",
          "horovod": "tab:purple"}
STYLES = {"2": ("-", "o"), "4": ("--", "s"), "8": (":", "^")}


def _size_label(b: int) -> str:
    for unit, div in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= div:
            return f"{b / div:g} {unit}"
    return f"{b} B"


def plot(json_path: str, png_path: str) -> str:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with open(json_path) as f:
        data = json.load(f)
    fig, ax = plt.subplots(figsize=(8, 5.2), dpi=120)
    sizes_seen = set()
    for nprocs, systems in sorted(data["results"].items(), key=lambda kv: int(kv[0])):
        ls, marker = STYLES.get(nprocs, ("-.", "x"))
        for name, r in systems.items():
            pts = sorted((int(s), v["algbw_GBps"]) for s, v in r.get("sizes", {}).items()
                         if v.get("algbw_GBps"))
            if not pts:
                continue
            sizes_seen.update(s for s, _ in pts)
            label = f"{LABELS.get(name, name)}"
            if r.get("transport"):
                label += f" [{r['transport']}]"
            ax.plot([s for s, _ in pts], [b for _, b in pts], linestyle=ls, marker=marker,
                    color=COLORS.get(name), label=f"{label}, {nprocs} procs")
    limits = data.get("limits") or {}
    for key, text, color in (("tcp_one_way_GBps", "loopback TCP, one stream", "gray"),
                             ("memcpy_GBps", "memcpy", "black")):
        if limits.get(key):
            ax.axhline(limits[key], color=color, linestyle=":", linewidth=1.2)
            ax.annotate(f"{text}: {limits[key]:.2f} GB/s", xy=(0.01, limits[key]),
                        xycoords=("axes fraction", "data"), xytext=(0, 3),
                        textcoords="offset points", fontsize=8, color=color)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    if sizes_seen:
        ticks = sorted(sizes_seen)
        ax.set_xticks(ticks)
        ax.set_xticklabels([_size_label(s) for s in ticks])
    ax.set_xlabel("payload (float32, bytes per rank)")
    ax.set_ylabel("algbw (GB/s) = bytes / latency")
    title = (f"Cross-process float32 sum all-reduce, loopback ({data.get('machine', '')}, "
             f"{data.get('date', '')})")
    if data.get("horovod"):  # e.g. "not run (build/horovod-venv missing; ...)"
        title += f"\nHorovod: {data['horovod']}"
    ax.set_title(title, fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7.5, loc="lower right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(png_path)), exist_ok=True)
    fig.savefig(png_path)
    plt.close(fig)
    return png_path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--json", default=os.path.join(RESULTS, "allreduce_multiprocess.json"))
    p.add_argument("--png", default=os.path.join(RESULTS, "allreduce_algbw.png"))
    args = p.parse_args()
    print(f"wrote {plot(args.json, args.png)}")


if __name__ == "__main__":
    main()
