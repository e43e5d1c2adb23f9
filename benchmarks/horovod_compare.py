"""tfx_dist.horovod against real Horovod, side by side in one run, 2 processes.

The benchmark: all-reduce latency and bandwidth from 4 KiB to 64 MiB,
and the ``fit`` throughput of a Horovod Keras script, on real Horovod 0.28.1
(TensorFlow 2.12, Gloo, in the virtual environment benchmarks/setup_horovod.sh
builds: build/horovod-venv) and on tfx_dist (TensorFlow 2.21, Keras 3).
Targets: faster than Horovod at every size; fit at least 1.5x Horovod's.

* All-reduce: allreduce_multiprocess.py's ``tfx (tf.function)`` and
  ``Horovod (tf.function)`` workers (the same timing code), alternated per
  round with the order rotating; per size the median over rounds of each
  round's latency (the slowest rank's median).
* Fit: benchmarks/horovod_fit_script.py, the same script but for the import,
  run by real Horovod under its ``horovodrun --gloo -np 2``, by
  tfx_dist.horovod under the same real ``horovodrun``, and by tfx_dist.horovod
  under ``tfx-dist-run -n 2``; every process on the CPUs tfx-dist-run gives its
  rank; alternated per round, order rotating; examples/s per run, the median
  over rounds, and the ratio to Horovod per round.

The 1-minute load average is recorded before and after each run.

    python benchmarks/horovod_compare.py           # writes benchmarks/results/horovod_compare.{json,md}
    python benchmarks/horovod_compare.py --rounds 1 --sizes 4096 --epochs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import allreduce_multiprocess as ar  # noqa: E402
import common  # noqa: E402

ROOT = ar.ROOT
RESULTS = os.path.join(ROOT, "benchmarks", "results")
FIT_SCRIPT = os.path.join(ROOT, "benchmarks", "horovod_fit_script.py")
SIZES = [4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
FIT_SYSTEMS = ("horovod", "tfx_horovodrun", "tfx_run")
# The machine's ceiling: the same script with no communication (FIT_BENCH_IMPL=none),
# as 2 independent processes at once, each on its rank's CPUs and its half of the
# data (examples/s added up), and as 1 process alone; in both environments, so that
# TensorFlow's own speed is told apart from communication.
CEILINGS = ("none_tf221_x2", "none_tf212_x2", "none_tf221_x1", "none_tf212_x1")
FIT_LABELS = {"horovod": "Horovod 0.28.1 (horovodrun --gloo, TF 2.12, Keras 2)",
              "tfx_horovodrun": "tfx_dist.horovod (real horovodrun --gloo, TF 2.21, Keras 3)",
              "tfx_run": "tfx_dist.horovod (tfx-dist-run, TF 2.21, Keras 3)",
              "none_tf221_x2": "ceiling: no communication, 2 independent processes (TF 2.21, Keras 3)",
              "none_tf212_x2": "ceiling: no communication, 2 independent processes (TF 2.12, Keras 2)",
              "none_tf221_x1": "no communication, 1 process alone, all CPUs (TF 2.21, Keras 3)",
              "none_tf212_x1": "no communication, 1 process alone, all CPUs (TF 2.12, Keras 2)"}


def _rotate(items, r):
    k = r % len(items)
    return list(items[k:]) + list(items[:k])


# --------------------------------------------------------------------------- all-reduce

def allreduce(venv: str, sizes: list[int], rounds: int, timeout: float) -> dict:
    runs = {"tfx_tf": [], "horovod": []}
    for r in range(rounds):
        for impl in _rotate(("tfx_tf", "horovod"), r):
            load = os.getloadavg()[0]
            if impl == "horovod":
                res = ar.run_horovod(venv, 2, sizes, quick=True, timeout=timeout)
            else:
                res = ar.run_impl(impl, 2, sizes, quick=True, timeout=timeout)
            res["load_before"] = load
            runs[impl].append(res)
            print(f"round {r} {impl} (load {load:.1f}): " + ", ".join(
                f"{ar._fmt_size(int(s))} {v['latency_ms']:.3f} ms" for s, v in res["sizes"].items()),
                flush=True)
    out = {"rounds": rounds, "command_horovod": runs["horovod"][0]["command"],
           "versions_horovod": runs["horovod"][0].get("versions", {}),
           "tf_function_floor_ms": {i: statistics.median(x["tf_function_floor_ms"] for x in runs[i])
                                    for i in runs},
           "load": [x["load_before"] for i in runs for x in runs[i]], "sizes": {}}
    for n in sizes:
        lat = {i: [x["sizes"][str(n)]["latency_ms"] for x in runs[i]] for i in runs}
        ratios = [h / t for h, t in zip(lat["horovod"], lat["tfx_tf"])]
        out["sizes"][str(n)] = {"latency_ms": {i: statistics.median(v) for i, v in lat.items()},
                                "per_round_ms": lat, "speedup": statistics.median(ratios),
                                "speedup_per_round": ratios}
    return out


# --------------------------------------------------------------------------- fit

def _fit_command(system: str, venv: str) -> tuple[list[str], dict]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TF_CONFIG")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_CPU_ALLOCATOR_USE_BFC="true",
               TFX_BENCH_CPU_BIND="cores")
    horovodrun = [os.path.join(venv, "bin", "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                  "--start-timeout", "300"]
    if system == "horovod":
        env["FIT_BENCH_IMPL"] = "horovod"
        return horovodrun + [os.path.join(venv, "bin", "python"), FIT_SCRIPT], env
    env["PYTHONPATH"] = ROOT
    env["FIT_BENCH_IMPL"] = "tfx"
    if system == "tfx_horovodrun":
        return horovodrun + [sys.executable, FIT_SCRIPT], env
    return [sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, FIT_SCRIPT], env


def ceiling_once(system: str, venv: str, epochs: int, timeout: float) -> dict:
    """FIT_BENCH_IMPL=none as independent processes started together; their examples/s added up."""
    nprocs = int(system[-1])
    python = sys.executable if "tf221" in system else os.path.join(venv, "bin", "python")
    base = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "TF_CONFIG")}
    base.update(TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", TF_CPU_ALLOCATOR_USE_BFC="true",
                TFX_BENCH_CPU_BIND="cores", FIT_BENCH_IMPL="none", FIT_BENCH_EPOCHS=str(epochs))
    t0 = time.time()
    procs = []
    for rank in range(nprocs):
        env = dict(base)
        if nprocs > 1:  # a lone process is not bound: it has the machine
            env.update(FIT_BENCH_RANK=str(rank), FIT_BENCH_SIZE=str(nprocs))
        procs.append(subprocess.Popen([python, FIT_SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True, env=env, cwd=ROOT))
    results = []
    for rank, proc in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=max(1.0, timeout - (time.time() - t0)))
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            raise RuntimeError(f"ceiling {system}: process {rank} still running after {timeout} s")
        lines = [line.split("RESULT ", 1)[1] for line in out.splitlines() if "RESULT " in line]
        if proc.returncode != 0 or not lines:
            raise RuntimeError(f"ceiling {system}: process {rank} failed ({proc.returncode}):\n"
                               f"{out[-2000:]}\n{err[-4000:]}")
        results.append(json.loads(lines[0]))
    res = dict(results[0])
    res["examples_per_s"] = sum(r["examples_per_s"] for r in results)
    res["wall_s"] = time.time() - t0
    res["command"] = (f"{nprocs} x FIT_BENCH_IMPL=none " + ("" if nprocs == 1 else "FIT_BENCH_RANK=r FIT_BENCH_SIZE=2 ")
                      + ("python3" if "tf221" in system else os.path.relpath(python, ROOT))
                      + " benchmarks/horovod_fit_script.py")
    return res


def fit_once(system: str, venv: str, epochs: int, timeout: float) -> dict:
    if system in CEILINGS:
        return ceiling_once(system, venv, epochs, timeout)
    cmd, env = _fit_command(system, venv)
    env["FIT_BENCH_EPOCHS"] = str(epochs)
    t0 = time.time()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"fit with {system} still running after {timeout} s: {' '.join(cmd)}")
    lines = [line.split("RESULT ", 1)[1] for line in proc.stdout.splitlines() if "RESULT " in line]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"fit with {system} failed ({proc.returncode}): {' '.join(cmd)}\n"
                           f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    res = json.loads(lines[0])
    res["wall_s"] = time.time() - t0
    res["command"] = " ".join("python3" if c == sys.executable else
                              os.path.relpath(c, ROOT) if c.startswith(ROOT + os.sep) else c for c in cmd)
    return res


def fit(venv: str, rounds: int, epochs: int, timeout: float, systems=None, previous: dict | None = None) -> dict:
    """Runs ``rounds`` more rounds (every system once per round, the order rotating) after
    ``previous``'s (a report's "fit", same systems and epochs), and summarizes them all."""
    systems = tuple(systems or FIT_SYSTEMS + CEILINGS)
    runs = {s: [] for s in systems}
    done = 0
    if previous:
        if tuple(previous["systems"]) != systems or previous["epochs"] != epochs:
            raise SystemExit(f"--append: the file has systems {previous['systems']} and {previous['epochs']} "
                             f"epochs; this run has {list(systems)} and {epochs}")
        runs, done = {s: list(previous["runs"][s]) for s in systems}, previous["rounds"]
    for r in range(done, done + rounds):
        for system in _rotate(systems, r):
            load = os.getloadavg()[0]
            res = fit_once(system, venv, epochs, timeout)
            runs[system].append({"round": r, "examples_per_s": res["examples_per_s"],
                                 "cpu_ms_per_step": res.get("cpu_ms_per_step"), "epoch_s": res["epoch_s"],
                                 "accuracy": res["accuracy"][-1], "load_before": load,
                                 "load_after": os.getloadavg()[0], "command": res["command"],
                                 "versions": res["versions"], "params": res["params"],
                                 "batch_per_rank": res["batch_per_rank"], "hidden": res["hidden"]})
            print(f"round {r} fit {system} (load {load:.1f}): {res['examples_per_s']:.0f} examples/s, "
                  f"CPU {res.get('cpu_ms_per_step') or 0:.2f} ms/step, "
                  f"epochs {', '.join(f'{t:.2f}' for t in res['epoch_s'])} s", flush=True)
    return summarize_fit(runs, systems, epochs)


def summarize_fit(runs: dict, systems, epochs: int) -> dict:
    """Medians over rounds, ratios to Horovod (and to the TF 2.21 ceiling) round by round."""
    eps = {s: [x["examples_per_s"] for x in runs[s]] for s in systems}
    cpu = {s: [x["cpu_ms_per_step"] for x in runs[s] if x.get("cpu_ms_per_step")] for s in systems}

    def ratios(base):
        return {s: [a / b for a, b in zip(eps[s], eps[base])] for s in systems if s != base}

    first = runs[systems[0]][0]
    out = {"rounds": len(eps[systems[0]]), "epochs": epochs, "systems": list(systems), "runs": runs,
           "examples_per_s": {s: statistics.median(v) for s, v in eps.items()}, "per_round": eps,
           "cpu_ms_per_step": {s: statistics.median(v) for s, v in cpu.items() if v},
           "cpu_ms_per_step_per_round": cpu,
           "final_accuracy": {s: [x["accuracy"] for x in runs[s]] for s in systems},
           "versions": {s: runs[s][0]["versions"] for s in systems},
           "params": first["params"], "batch_per_rank": first["batch_per_rank"], "hidden": first["hidden"],
           "commands": {s: runs[s][0]["command"] for s in systems},
           "load": {s: [(x["load_before"], x["load_after"]) for x in runs[s]] for s in systems}}
    if "horovod" in systems:
        out["ratio_per_round"] = ratios("horovod")
        out["ratio"] = {s: statistics.median(v) for s, v in out["ratio_per_round"].items()}
    if "none_tf221_x2" in systems:
        out["to_ceiling_per_round"] = ratios("none_tf221_x2")
        out["to_ceiling"] = {s: statistics.median(v) for s, v in out["to_ceiling_per_round"].items()}
    return out


# --------------------------------------------------------------------------- report

def markdown(report: dict) -> str:
    title = "# " + report["title"] if report.get("title") else (
        "# tfx_dist.horovod vs Horovod (2 processes, loopback)" if "allreduce" in report else
        "# Horovod fit: tfx_dist.horovod, Horovod and the machine's ceiling (2 processes)")
    lines = [title, "",
             f"{report['date']}, {report['machine']}. Real Horovod "
             f"{report.get('horovod_version', '?')} with TensorFlow 2.12 and Gloo in its own virtual "
             "environment (`benchmarks/setup_horovod.sh`: Horovod does not build against this "
             "project's TensorFlow 2.21), side by side with tfx_dist in one run, alternated round by "
             "round with the order rotating; every process on the CPU share `tfx-dist-run` gives its "
             "rank. Targets: faster than Horovod at every size; fit at least 1.5x Horovod's.",
             ""]
    a = report.get("allreduce")
    if a:
        lines += [f"**All-reduce** (float32 sum, `tf.function` on both sides: allreduce_multiprocess.py's "
                  f"workers; Horovod as `{a['command_horovod']}`). {a['rounds']} rounds; per size the "
                  "median over rounds of each run's latency (the slowest rank's median over repeats); "
                  "speed-up = Horovod latency / tfx latency, median of the per-round ratios. A trivial "
                  f"`tf.function` call took {a['tf_function_floor_ms']['tfx_tf']:.3f} ms in the tfx "
                  f"processes (TF 2.21) and {a['tf_function_floor_ms']['horovod']:.3f} ms in Horovod's "
                  f"(TF 2.12). 1-minute load average at the runs' starts: "
                  f"{min(a['load']):.1f}-{max(a['load']):.1f}.", "",
                  "| size | tfx (tf.function) | Horovod (tf.function) | speed-up (median) | per round | target |",
                  "|---|---|---|---|---|---|"]
        for n, r in a["sizes"].items():
            t, h = r["latency_ms"]["tfx_tf"], r["latency_ms"]["horovod"]
            lines.append(f"| {ar._fmt_size(int(n))} | {t:.3f} ms, {int(n) / t / 1e6:.2f} GB/s | "
                         f"{h:.3f} ms, {int(n) / h / 1e6:.2f} GB/s | {r['speedup']:.2f}x | "
                         f"{', '.join(f'{x:.2f}' for x in r['speedup_per_round'])} | "
                         f"{'met' if min(r['speedup_per_round']) > 1 else ('met (median)' if r['speedup'] > 1 else 'not met')} |")
        lines.append("")
    f = report.get("fit")
    if f:
        lines += fit_markdown(f)
    when = (f"{report['first_date']} to {report['date']}" if report.get("first_date") else report["date"])
    lines += [f"*Command: `{report['command']}`"
              + "".join(f", then `{c}`" for c in report.get("appended", [])) + f" ({when}).*", ""]
    return "\n".join(lines)


def _spread(values, fmt="{:.2f}") -> str:
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}" if values else "-"


def fit_markdown(f: dict) -> list[str]:
    systems = f.get("systems", FIT_SYSTEMS)
    eps, hvd = f["examples_per_s"], f.get("ratio", {})
    ceil, cpu = f.get("to_ceiling", {}), f.get("cpu_ms_per_step", {})
    lines = [f"**Fit** (`benchmarks/horovod_fit_script.py`: MLP 784-{f['hidden']}-{f['hidden']}-10, "
             f"{f['params']:,} parameters, batch {f['batch_per_rank']} per rank, 8192 synthetic "
             "examples per rank, `DistributedOptimizer(Adam)`, broadcast, metric-average and "
             f"warmup callbacks; {f['epochs']} epochs, examples/s = both ranks' examples of an "
             "epoch / its time, median over the epochs after the first). "
             f"{f['rounds']} rounds, every system once per round, the order rotating, so drift hits all; "
             "ratios are taken within a round, then their median (and range) over rounds. CPU / step: "
             "rank 0's CPU seconds (all its threads) per step, median over rounds: what a step costs the "
             "machine, which load inflates much less than wall time.", "",
             "| system | examples/s: median (range) | ratio to Horovod: median (range) | "
             "ratio to the TF 2.21 ceiling: median (range) | CPU / step (range) | final train accuracy | "
             "load avg at starts |", "|---|---|---|---|---|---|---|"]
    for s in systems:
        lines.append(
            f"| {FIT_LABELS[s]} | {eps[s]:.0f} ({_spread(f['per_round'][s], '{:.0f}')}) | "
            + (f"{hvd[s]:.2f}x ({_spread(f['ratio_per_round'][s])})" if s in hvd else "1" if s == "horovod" else "-")
            + " | " + (f"{ceil[s]:.2f}x ({_spread(f['to_ceiling_per_round'][s])})" if s in ceil
                       else "1" if s == "none_tf221_x2" else "-")
            + " | " + (f"{cpu[s]:.2f} ms ({_spread(f['cpu_ms_per_step_per_round'][s])})" if s in cpu else "-")
            + f" | {_spread(f['final_accuracy'][s], '{:.3f}')} | "
            + _spread([b for b, _ in f["load"][s]], "{:.1f}") + " |")
    lines += ["", "Commands: " + "; ".join(f"`{c}`" for c in f["commands"].values()) + ".", ""]
    if "none_tf221_x2" in eps and "horovod" in eps:
        loads = [x for pairs in f["load"].values() for pair in pairs for x in pair]
        tfx = [s for s in ("tfx_run", "tfx_horovodrun") if s in eps]
        best = max(tfx, key=lambda s: ceil[s]) if tfx else None
        noisy = f["rounds"] < 3 or max(loads) > 4
        ceiling_x = hvd["none_tf221_x2"]
        text = (f"**The machine's ceiling.** With no communication at all, 2 independent processes "
                f"(each on its rank's CPUs and half of the data, at once) do {eps['none_tf221_x2']:.0f} "
                f"examples/s under TF 2.21 / Keras 3: {ceiling_x:.2f}x Horovod's fit (median of the per-round "
                f"ratios; range {_spread(f['ratio_per_round']['none_tf221_x2'])}). ")
        if best:
            text += (f"tfx_dist ({best}) runs at {ceil[best]:.0%} of that ceiling round by round (range "
                     f"{_spread(f['to_ceiling_per_round'][best])})")
            if best in cpu and "none_tf221_x2" in cpu:
                text += (f"; its step costs {cpu[best]:.2f} ms of CPU against the ceiling's "
                         f"{cpu['none_tf221_x2']:.2f} ms ({cpu[best] / cpu['none_tf221_x2'] - 1:+.0%}: "
                         "the all-reduce and its runtime thread)")
            text += ". "
        if noisy:
            text += (f"With {f['rounds']} round(s) and a load average of {min(loads):.1f}-{max(loads):.1f} "
                     "the wall-time figures cannot carry a conclusion on their own: the ceiling's 2 processes "
                     "never wait for each other, a synchronous step waits for the slower rank, so load from "
                     "other users widens the gap; rerun on a quiet machine for a verdict. ")
        elif ceiling_x < 1.5:
            text += ("A 1.5x target is above what this machine can do with this script: even with no "
                     "communication it is not reached. ")
        else:
            text += "The ceiling is above 1.5x Horovod: the target is not at this machine's limit. "
        if "none_tf212_x2" in eps:
            text += (f"The TF version alone: with no communication, TF 2.12 / Keras 2 ran "
                     f"{eps['none_tf212_x2'] / eps['none_tf221_x2']:.2f}x TF 2.21 / Keras 3's examples/s as "
                     "2 processes")
            if "none_tf212_x1" in eps and "none_tf221_x1" in eps:
                text += f" and {eps['none_tf212_x1'] / eps['none_tf221_x1']:.2f}x as 1 process"
            text += "."
        lines += [text, ""]
    return lines


def main() -> None:
    import platform

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--rounds", type=int, default=3, help="all-reduce rounds")
    parser.add_argument("--fit-rounds", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--skip", choices=("allreduce", "fit", "ceiling"), nargs="*", default=[])
    parser.add_argument("--horovod-venv", default=ar.DEFAULT_HOROVOD_VENV)
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--out", default=os.path.join(RESULTS, "horovod_compare.json"))
    parser.add_argument("--systems", default="",
                        help="fit systems, comma-separated (default: all); e.g. horovod,tfx_run,none_tf221_x2")
    parser.add_argument("--append", action="store_true",
                        help="add --fit-rounds rounds to --out's fit rounds (same systems and epochs), "
                             "so that rounds can be run in several locked sessions")
    parser.add_argument("--markdown-only", action="store_true", help="rewrite --out's .md from its .json")
    args = parser.parse_args()
    if args.markdown_only:
        return common.rewrite_markdown("horovod_compare", args.out, markdown)
    if not os.path.exists(os.path.join(args.horovod_venv, "bin", "horovodrun")):
        sys.exit(f"{args.horovod_venv}/bin/horovodrun missing: run benchmarks/setup_horovod.sh "
                 "(make horovod) first")
    report = {"command": "python " + " ".join(["benchmarks/horovod_compare.py"] + sys.argv[1:]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "machine": f"{platform.machine()}, {os.cpu_count()} cores"}
    if "allreduce" not in args.skip:
        report["allreduce"] = allreduce(args.horovod_venv, [int(s) for s in args.sizes.split(",")],
                                        args.rounds, args.timeout)
        report["horovod_version"] = report["allreduce"]["versions_horovod"].get("horovod")
    if "horovod_version" not in report:  # all-reduce skipped: ask the venv
        report["horovod_version"] = subprocess.run(
            [os.path.join(args.horovod_venv, "bin", "python"), "-c", "import horovod; print(horovod.__version__)"],
            capture_output=True, text=True, timeout=args.timeout).stdout.strip() or None
    if "fit" not in args.skip:
        systems = (args.systems.split(",") if args.systems else
                   FIT_SYSTEMS + (CEILINGS if "ceiling" not in args.skip else ()))
        unknown = sorted(set(systems) - set(FIT_LABELS))
        if unknown:
            parser.error(f"unknown --systems {unknown}; known: {sorted(FIT_LABELS)}")
        previous = None
        if args.append and os.path.exists(args.out):
            with open(args.out) as f:
                old = json.load(f)
            previous = old.get("fit")
            report["appended"] = old.get("appended", []) + [report["command"]]
            report["command"], report["first_date"] = old["command"], old.get("first_date", old["date"])
            if previous and "runs" not in previous:
                parser.error(f"--append: {args.out} has no per-run records (written before --append existed)")
        # One round at a time, written after each: a run cut short keeps the rounds it finished.
        for _ in range(args.fit_rounds):
            report["fit"] = previous = fit(args.horovod_venv, 1, args.epochs, args.timeout, systems, previous)
            report["date"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            common.write_outputs("horovod_compare", report, markdown(report), args.out)
    md = markdown(report)
    common.write_outputs("horovod_compare", report, md, args.out)
    print(md)


if __name__ == "__main__":
    main()
