"""Runs every tfx_dist benchmark and writes BENCHMARKS.md.

    python benchmarks/run_all.py           # full run (about 15 minutes on 2 cores)
    python benchmarks/run_all.py --quick   # smoke run
    python benchmarks/run_all.py --only multi_worker_fit   # rerun one section
    make bench                             # the same as the full run

``--only`` reruns the named scripts and keeps every other section of the last
run (each section says when and at which commit it ran).

Each benchmark is its own script, run here as a subprocess (the benchmarks set
up logical devices before TensorFlow starts, and some start processes of
their own). The convention every script follows: it accepts ``--quick`` and
``--out PATH.json`` and writes a markdown section to ``PATH.md`` beside the
JSON. Optional scripts (written by others, possibly not there yet) run when
their file exists; BENCHMARKS.md says which were missing or failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUTPUT = os.path.join(common.ROOT, "BENCHMARKS.md")
MANIFEST = os.path.join(common.RESULTS, "run_all.json")
# The algbw plot of the cross-process all-reduce (plot_allreduce.py).
PLOT = os.path.join(common.RESULTS, "allreduce_algbw.png")

# Scripts whose markdown --render-only regenerates from their JSON (module.markdown(result)).
RENDERERS = ("local_allreduce.py", "central_storage.py", "hybrid_embedding.py", "ps_ctr.py")

# (result name, script, extra args in a full run, extra args in a quick run (None: skip), required)
BENCHMARKS = [
    ("local_allreduce", "local_allreduce.py", ["--diagnose"], [], True),
    # Does the fused op gain from its second thread? The same diagnostics on one.
    ("local_allreduce_1thread", "local_allreduce.py",
     ["--diagnose-only", "--devices", "2", "4", "--intra-op-threads", "1"], None, True),
    # And with TensorFlow's caching (BFC) CPU allocator: without it, large outputs
    # are fresh pages every call, and the page faults cost more than the reduction.
    ("local_allreduce_bfc", "local_allreduce.py",
     ["--diagnose-only", "--devices", "2", "4", "--bfc-allocator"], None, True),
    ("keras_fit", "central_storage.py", [], [], True),
    # Cross-process all-reduce: 2 and 4 processes, sizes cut to fit the time budget.
    ("allreduce_multiprocess", "allreduce_multiprocess.py",
     ["--nprocs", "2", "4", "--sizes", "4096,262144,4194304,67108864"], [], False),
    # Hierarchical vs flat-ring all-reduce, 2 simulated hosts x 2 workers, 1 Gbit/s
    # link (root and network namespaces; else its section says why it did not run).
    ("hierarchical_allreduce", "hierarchical_allreduce.py", [], [], False),
    # The same with 4 workers per host (8 processes on this machine's 2 cores).
    ("hierarchical_allreduce_4x4", "hierarchical_allreduce.py", ["--layout", "4", "4", "--quick"], None,
     False),
    # All-to-all vs all-gather then slice, 2 and 4 processes (numpy API).
    ("alltoall", "alltoall.py", [], [], False),
    # Multi-worker Keras fit throughput on 1, 2 and 4 one-thread workers.
    ("multi_worker_fit", "multi_worker_fit.py", [], [], False),
    # Parameter servers: lookup round trip vs TF's PS; click-through throughput
    # vs TF's PS and a dense Embedding under MWMS, and worker memory as the table grows.
    ("ps_lookup", "ps_lookup.py", [], [], False),
    ("ps_ctr", "ps_ctr.py", [], [], False),
    # HybridStrategy (fused and unfused all-to-alls, 2 workers + 2 ps) vs mirrored Embedding, 100K-10M rows.
    ("hybrid_embedding", "hybrid_embedding.py", [], [], False),
]


def run_one(name: str, script: str, extra: list[str], quick: bool, timeout: float) -> dict:
    path = os.path.join(HERE, script)
    out = os.path.join(common.RESULTS, name + ".json")
    if not os.path.exists(path):
        return {"script": script, "status": "missing"}
    cmd = [sys.executable, path, "--out", out] + (["--quick"] if quick else []) + extra
    print(f"== {' '.join(cmd[1:])}", flush=True)
    t0 = time.time()
    if os.path.exists(out):
        os.remove(out)
    try:
        proc = subprocess.run(cmd, cwd=common.ROOT, timeout=timeout, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        log, rc = proc.stdout, proc.returncode
    except subprocess.TimeoutExpired as e:
        log, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), None
    wall = time.time() - t0
    with open(os.path.join(common.RESULTS, name + ".log"), "w") as f:
        f.write(log)
    md_path = os.path.splitext(out)[0] + ".md"
    if rc != 0 or not os.path.exists(md_path):
        status = "timed out" if rc is None else f"failed (exit {rc})"
        print(f"   {status} after {wall:.0f} s; last lines:\n{log[-2000:]}", flush=True)
        return {"script": script, "status": status, "wall_s": wall, "log_tail": log[-1500:],
                "command": " ".join(["python"] + cmd[1:])}
    print(f"   done in {wall:.0f} s", flush=True)
    with open(md_path) as f:
        section = f.read()
    result = None
    try:
        with open(out) as f:
            result = json.load(f)
    except (OSError, ValueError):
        pass
    return {"script": script, "status": "ok", "wall_s": wall, "markdown": section,
            "result": result,
            "command": " ".join(["python", os.path.relpath(path, common.ROOT)] + cmd[2:])}


def _relative(cmd: str) -> str:
    # Also a checkout elsewhere (an earlier run kept by --only in another worktree).
    return re.sub(r"(?<=\s)/\S*?/(?=benchmarks/)", "", cmd.replace(common.ROOT + os.sep, ""))


def targets_summary(runs: dict) -> list[str]:
    lines = []
    la = runs.get("local_allreduce", {}).get("result")
    if la and la.get("targets"):
        t = la["targets"]
        ns = t["never_slower_than_tf_best"]
        lines.append(f"| local all-reduce: never slower than TF's best at any size | "
                     f"{common.met(ns['ok'])} | "
                     + "; ".join(f"{c['devices']} dev / {c['list']}: {c['ours_ms']:.2f} vs "
                                 f"{c['tf_best_ms']:.2f} ms"
                                 + (" (slower, within noise)" if c.get("within_noise") else
                                    "" if c["ok"] else " (**slower**)")
                                 for c in ns["cases"]) + " (ours vs TF's best, over baseline) |")
        if "4dev_64MiB_1.5x_faster_than_tf_best" in t:
            s = t["4dev_64MiB_1.5x_faster_than_tf_best"]
            b = t["4dev_64MiB_within_1.5x_of_bandwidth_bound"]
            lines.append(f"| local all-reduce, 4 devices, 64 MiB: >= 1.5x faster than TF's best | "
                         f"{common.met(s['ok'])} | {s['speedup']:.2f}x |")
            lines.append(f"| local all-reduce, 4 devices, 64 MiB: within 1.5x of the memory-bandwidth "
                         f"bound | {common.met(b['ok'])} | {b['ours_over_baseline_ms']:.2f} ms vs "
                         f"{b['bound_ms']:.2f} ms bound ({b['x_bound']:.2f}x)"
                         + (f"; a plain C loop: {b['c_sum_ms']:.2f} ms for the same sum, "
                            f"{b['c_read_ms']:.2f} ms to read the inputs alone"
                            if "c_sum_ms" in b else "")
                         + (f"; against the bandwidth of the case's own rounds: "
                            f"{b['ours_over_baseline_ms'] / b['rounds_bound_ms']:.2f}x"
                            if "rounds_bound_ms" in b else "") + " |")
    for name, what in (("local_allreduce_1thread", "1 TF intra-op thread"),
                       ("local_allreduce_bfc", "TF's BFC (caching) CPU allocator")):
        diag = (runs.get(name, {}).get("result") or {}).get("diagnostics", {})
        for title, case in diag.items():
            if not title.startswith("4 devices"):
                continue
            r = case["systems"]["tfx_fused"]
            lines.append(f"| (diagnostic, same targets with {what}) 4 devices, 64 MiB | "
                         f"{common.met(r['tf_best_over_this'] >= 1.5)} / "
                         f"{common.met(r['x_bound'] <= 1.5)} | {r['tf_best_over_this']:.2f}x TF's "
                         f"best; {r['over_baseline_ms']:.2f} ms vs {case['bound_ms']:.2f} ms bound "
                         f"({r['x_bound']:.2f}x) |")
    kf = runs.get("keras_fit", {}).get("result")
    if kf and "fit" in kf.get("benches", {}):
        from central_storage import fit_verdict

        systems = kf["benches"]["fit"]["systems"]
        tf_best = max(("tf_mirrored_default", "tf_mirrored_r2od"),
                      key=lambda s: systems[s]["steps_per_s"])
        best = systems[tf_best]["steps_per_s"]
        ours = systems["tfx_mirrored"]["steps_per_s"]
        lines.append(f"| Keras fit, tfx_dist.MirroredStrategy no slower than TF's (4 CPUs) | "
                     f"{fit_verdict(systems['tfx_mirrored'], systems[tf_best])} | {ours:.1f} vs "
                     f"{best:.1f} steps/s ({ours / best:.2f}x) |")
    if kf and "central" in kf.get("benches", {}):
        systems = kf["benches"]["central"]["systems"]
        ours, theirs = systems["tfx_central"]["step_ms"], systems["tf_central"]["step_ms"]
        check = systems["tf_central"].get("dropout_check", {})
        ours_trains = systems["tfx_central"].get("dropout_check", {}).get("ok")
        lines.append(f"| CentralStorageStrategy: step time vs TF's (no target set) | - | "
                     f"{ours:.2f} vs {theirs:.2f} ms ({theirs / ours:.2f}x); TF's with Dropout: "
                     f"{'trains' if check.get('ok') else 'fails'}, ours: "
                     f"{'trains' if ours_trains else 'fails'} |")
    lines += _cross_process_targets(runs)
    lines += horovod_targets()
    lines += _parameter_server_targets(runs)
    return lines


def _parameter_server_targets(runs: dict) -> list[str]:
    """The parameter servers' targets: lookup latency, click-through throughput, flat worker memory."""
    lines = []
    lookup = runs.get("ps_lookup", {}).get("result")
    if lookup:
        lines.append(f"| PS lookup of 4096 ids, 2 servers: >= 10x lower p50/p99 than TF's PS | "
                     f"{common.met(min(lookup['ratio_p50'], lookup['ratio_p99']) >= 10)} | "
                     f"{lookup['ratio_p50']:.1f}x (p50), {lookup['ratio_p99']:.1f}x (p99) in a tf.function"
                     + (f"; eagerly {lookup['ratio_eager_p50']:.1f}x (p50), "
                        f"{lookup['ratio_eager_p99']:.1f}x (p99)" if "ratio_eager_p50" in lookup else "")
                     + (f"; this machine's floor for a lookup through TensorFlow (its call + an empty "
                        f"round trip + two copies of the rows): "
                        f"{lookup['machine_floor_ms']['tf_function']:.2f} ms in a "
                        f"tf.function, {lookup['machine_floor_ms']['eager']:.2f} ms eagerly, 10x needs "
                        f"{lookup['target_budget_ms']:.2f} ms"
                        if "machine_floor_ms" in lookup else "") + " |")
    ctr = runs.get("ps_ctr", {}).get("result")
    if ctr and ctr.get("ratio_vs_best_baseline"):
        ratio = ctr["ratio_vs_best_baseline"]
        bound = ctr.get("mlp_ceiling_vs_best_baseline")
        lines.append(f"| PS click-through training, 2 ps + 2 workers: >= 3x the best baseline's "
                     f"examples/s | {common.met(ratio >= 3)} | {ratio:.2f}x"
                     + (f" (medians of {ctr['rounds']} rounds; round by round "
                        + ", ".join(f"{r:.2f}x" for r in ctr["round_ratios"]) + ")"
                        if ctr.get("rounds", 1) > 1 and ctr.get("round_ratios") else "")
                     + (f"; this machine's ceiling for the model (its dense layers alone, no "
                        f"table) is {bound:.2f}x the best baseline" if bound else "") + " |")
    if ctr and ctr.get("rss_growth"):
        growth = ctr["rss_growth"]
        lines.append(f"| PS worker memory flat (within 10%) as the table grows 10x | "
                     f"{common.met(abs(growth - 1) <= 0.10)} | RSS x{growth:.3f} |")
    return lines


def _cross_process_targets(runs: dict) -> list[str]:
    """The multi-worker issue's targets: 2 processes, and 2-worker Keras fit."""
    lines = []
    ar = (runs.get("allreduce_multiprocess", {}).get("result") or {}).get("results", {}).get("2", {})
    ours = ar.get("tfx_tf", {}).get("sizes", {})
    tf_ = ar.get("tf_mwms", {}).get("sizes", {})
    hvd = ar.get("horovod", {}).get("sizes", {})

    def latency(system, size):
        return system.get(str(size), {}).get("latency_ms")

    small, big = latency(ours, 4096), latency(ours, 64 << 20)
    tf_small, tf_big, hvd_big = latency(tf_, 4096), latency(tf_, 64 << 20), latency(hvd, 64 << 20)
    if small and tf_small:
        floor = ar["tfx_tf"].get("tf_function_floor_ms")
        speedup = tf_small / small
        lines.append(
            f"| cross-process all-reduce, 2 processes, 4 KiB in `tf.function`: <= 0.25 ms and >= 10x "
            f"TF's MWMS | {common.met(small <= 0.25 and speedup >= 10)} | {small:.3f} ms vs "
            f"{tf_small:.3f} ms ({speedup:.1f}x)"
            + (f"; a trivial `tf.function` call alone took {floor:.3f} ms in the same processes"
               + (", above the 0.25 ms target" if floor > 0.25 else "") if floor else "") + " |")
    if big and tf_big:
        algbw = (64 << 20) / big / 1e6
        vs_tf = tf_big / big
        vs_hvd = hvd_big / big if hvd_big else None
        ok = algbw >= 2.5 and vs_tf >= 15 and (vs_hvd is None or vs_hvd >= 4)
        lines.append(
            f"| cross-process all-reduce, 2 processes, 64 MiB: >= 2.5 GB/s algbw, >= 15x TF's MWMS, "
            f">= 4x Horovod | {common.met(ok)} | {algbw:.2f} GB/s; {vs_tf:.1f}x TF; "
            + (f"{vs_hvd:.1f}x Horovod" if vs_hvd else "Horovod not run") + " |")
    fit = runs.get("multi_worker_fit", {}).get("result") or {}
    ratio = fit.get("ratios", {}).get("2/1")
    if ratio:
        per = fit.get("ratios_per_round", {}).get("2/1", [])
        lines.append(
            f"| multi-worker Keras fit: 2 one-thread workers >= 1.7x one worker's examples/s | "
            f"{common.met(ratio >= 1.7)} | {ratio:.2f}x"
            + (f" (round by round: {', '.join(f'{x:.2f}x' for x in per)})" if per else "") + " |")
    return lines


def git_commit() -> str | None:
    """The commit the run started from (the op libraries are whatever was built then)."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=common.ROOT, text=True,
                             capture_output=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


# Sections that run_all.py does not rerun: (file in benchmarks/results/, title if the file has none,
# the command that rewrites it, what it needs that a run of every benchmark does not give).
COPIED_SECTIONS = (
    ("fused_reduce_gpu.md", "## TfxFusedReduce's GPU kernel", "make gpu-check", "a GPU and nvcc"),
    ("embedding_gpu.md", "## The embedding store's GPU kernels", "scripts/gpu_check.sh embedding",
     "a GPU and nvcc"),
    # Here horovod_sections(): horovod_compare's all-reduce and the newest of its fit runs.
    ("horovod_fit_profile.md", "## Where the Horovod fit step goes",
     "python benchmarks/horovod_fit_profile.py", "a run of its own"),
    ("timeline_overhead.md", "## Timeline overhead", "python benchmarks/timeline_overhead.py",
     "a run of its own"),
    ("wire_protection.md", "## Wire protection of TCP connections",
     "python benchmarks/wire_protection.py", "a run of its own"),
    ("service_protection.md", "## Wire protection of the parameter-server service",
     "python benchmarks/service_protection.py", "a run of its own"),
    ("preemption_check.md", "## Preemption handling: cost per step and per save",
     "python benchmarks/preemption_check.py", "a run of its own"),
    ("design_measurements.md", "## Measurements behind design choices", None, None),
)
# horovod_compare.py's result files: all-reduce and fit, then fit-only reruns.
HOROVOD_RESULTS = ("horovod_compare.json", "horovod_fit_ceiling.json", "horovod_fit_cpu.json")


def _not_rerun(command: str | None, needs: str | None) -> list[str]:
    if command is None:
        return []
    return ["", f"Not rerun by `run_all.py` (it needs {needs}): `{command}` rewrites this section."]


def _copied_section(name: str, default_title: str, command: str | None, needs: str | None) -> list[str]:
    """``benchmarks/results/<name>`` as a section of this file (its own title one level down)."""
    path = os.path.join(common.RESULTS, name)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        body = f.read().strip().splitlines()
    title = "#" + body[0] if body and body[0].startswith("# ") else default_title
    return [title] + _not_rerun(command, needs) + body[1:] + [""]


def _horovod_reports() -> list[dict]:
    reports = []
    for name in HOROVOD_RESULTS:
        try:
            with open(os.path.join(common.RESULTS, name)) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            continue
    return reports


def _newest_fit_report() -> dict | None:
    """The newest of the Horovod fit results (horovod_compare, its ceiling and CPU reruns) with ratios."""
    reports = [r for r in _horovod_reports() if r.get("fit", {}).get("ratio") and r.get("date")]
    return max(reports, key=lambda r: r["date"]) if reports else None  # "YYYY-MM-DD HH:MM UTC" sorts


def horovod_sections() -> list[str]:
    """tfx_dist.horovod against real Horovod: the latest all-reduce run and the latest fit run, once each
    (horovod_compare.py renders both from their JSON)."""
    import horovod_compare

    lines = []
    compare = next((r for r in _horovod_reports() if r.get("allreduce")), None)
    fit = _newest_fit_report()
    command, needs = "python benchmarks/horovod_compare.py", "`make horovod`'s build/horovod-venv"
    if compare:
        report = {k: v for k, v in compare.items() if k != "fit" or fit is None or fit is compare}
        body = horovod_compare.markdown(report).strip().splitlines()
        lines += ["#" + body[0]] + _not_rerun(command, needs) + body[1:] + [""]
    if fit and fit is not compare:
        body = horovod_compare.markdown({k: v for k, v in fit.items() if k != "title"}).strip().splitlines()
        lines += ["#" + body[0]] + _not_rerun(command + " --skip allreduce", needs) + body[1:] + [""]
    return lines


def horovod_targets() -> list[str]:
    """tfx_dist.horovod's targets against real Horovod, from benchmarks/results/horovod_compare.json
    (and the newest fit run) when it is there."""
    try:
        with open(os.path.join(common.RESULTS, "horovod_compare.json")) as f:
            report = json.load(f)
    except (OSError, ValueError):
        return []
    lines = []
    sizes = report.get("allreduce", {}).get("sizes", {})
    if sizes:
        def label(n: str) -> str:
            return f"{int(n) >> 20} MiB" if int(n) >= 1 << 20 else f"{int(n) >> 10} KiB"

        speedups = ", ".join(f"{label(n)} {r['speedup']:.2f}x" for n, r in sizes.items())
        lines.append(f"| all-reduce vs real Horovod, 2 processes, 4 KiB-64 MiB: faster at every size "
                     f"(median over rounds; run on its own, {report['date']}) | "
                     f"{common.met(all(r['speedup'] > 1 for r in sizes.values()))} | {speedups} |")
    fit_report = _newest_fit_report() or report
    fit = fit_report.get("fit", {}).get("ratio", {})
    ours = {s: r for s, r in fit.items() if s.startswith("tfx_")}
    if ours:
        ceiling = fit.get("none_tf221_x2")
        lines.append(f"| Horovod Keras script's fit, 2 processes: >= 1.5x real Horovod's examples/s "
                     f"(latest run, on its own, {fit_report['date']}) | "
                     f"{common.met(max(ours.values()) >= 1.5)} | "
                     + "; ".join(f"{s}: {r:.2f}x" for s, r in ours.items())
                     + (f"; no-communication ceiling (TF 2.21): {ceiling:.2f}x" if ceiling else "") + " |")
    return lines


def write_markdown(runs: dict, quick: bool, total_s: float, date: str,
                   commit: str | None = None) -> str:
    import platform

    info = common.machine_info()
    for r in runs.values():
        m = (r.get("result") or {}).get("machine")
        if not isinstance(m, dict):
            continue
        for key in ("tensorflow", "keras"):
            if key in m and key not in info:
                info[key] = m[key]

    def when(r: dict) -> str | None:
        """When a section ran, where that differs from this file's own date and commit."""
        ran = (r.get("date", date), r.get("commit", commit))
        return None if ran == (date, commit) else f"run {ran[0]} at `{ran[1]}`"

    reruns = any(when(r) for r in runs.values())
    lines = ["# tfx_dist benchmarks", "",
             f"Generated by `python benchmarks/run_all.py{' --quick' if quick else ''}` "
             f"(`make bench` runs the full set) on {date}"
             + (f" at commit `{commit}`" if commit else "") + f", in {total_s / 60:.1f} min"
             + (" — a **quick smoke run**: few repetitions, treat figures as rough." if quick else ".")
             + (" Some sections come from an earlier run (`--only` reruns the others): each such "
                "section says when it ran." if reruns else ""),
             "",
             f"Machine: {info['cores']} cores, {info['cpu']} ({info['machine']}), "
             f"{info.get('mem_GiB', '?')} GiB; Python {platform.python_version()}, TensorFlow "
             f"{info.get('tensorflow', '?')}, Keras {info.get('keras', '?')}, numpy {info['numpy']} "
             "(the machine is shared with other engineers' builds and tests: every table "
             "compares its systems side by side in the same run, interleaved, and quotes medians "
             "and ratios; absolute times from other runs are not comparable).", "",
             "Rerun: `make bench` or `python benchmarks/run_all.py` (`--quick` for a smoke run); "
             "each script also runs alone (see its docstring). Raw results: "
             "`benchmarks/results/*.json`.", ""]
    summary = targets_summary(runs)
    if summary:
        lines += ["## Targets", "", "| target | status | figures |", "|---|---|---|"] + summary + [""]
    for name, r in runs.items():
        if r["status"] == "ok":
            lines += [r["markdown"].rstrip(), ""]
            if name == "allreduce_multiprocess" and os.path.exists(PLOT):
                lines += [f"![algbw against payload size]({os.path.relpath(PLOT, common.ROOT)})",
                          ""]
            facts = ([f"{r['wall_s']:.0f} s"] if r.get("wall_s") is not None else []) + (
                [when(r)] if when(r) else [])
            lines += [f"*Command: `{_relative(r['command'])}`"
                      + (f" ({'; '.join(facts)})" if facts else "") + ".*", ""]
    lines += _copied_section(*COPIED_SECTIONS[0]) + _copied_section(*COPIED_SECTIONS[1])
    lines += horovod_sections()
    for section in COPIED_SECTIONS[2:]:
        lines += _copied_section(*section)
    missing = [r["script"] for r in runs.values() if r["status"] == "missing"]
    failed = [(r["script"], r) for r in runs.values() if r["status"] not in ("ok", "missing")]
    if missing or failed:
        lines += ["## Not run", ""]
        lines += [f"- `benchmarks/{s}`: not in the tree yet." for s in missing]
        for s, r in failed:
            tail = r.get("log_tail", "").strip().splitlines()[-5:]
            lines.append(f"- `benchmarks/{s}`: {r['status']} after {r['wall_s']:.0f} s "
                         f"(`{_relative(r['command'])}`; log in benchmarks/results/): "
                         + " / ".join(f"`{t.strip()[:200]}`" for t in tail))
        lines.append("")
    titles = [line for line in lines if line.startswith("## ")]
    twice = sorted({t for t in titles if titles.count(t) > 1})
    if twice:  # one section per benchmark: its latest result (earlier ones stay in git)
        raise SystemExit(f"BENCHMARKS.md would hold these sections twice: {twice}")
    return "\n".join(lines)


def load_run(name: str, record: dict) -> dict:
    """A recorded run with its result and markdown read back from benchmarks/results/
    (our own sections re-rendered from their JSON, so that today's rules apply)."""
    import importlib

    r = dict(record)
    if r["status"] == "ok":
        base = os.path.join(common.RESULTS, name)
        with open(base + ".json") as f:
            r["result"] = json.load(f)
        with open(base + ".md") as f:
            r["markdown"] = f.read()
        if r["script"] in RENDERERS:
            module = importlib.import_module(os.path.splitext(r["script"])[0])
            r["markdown"] = module.markdown(r["result"])
    return r


def render_only(output: str) -> None:
    """BENCHMARKS.md from the last run's results; our sections re-rendered from their JSON."""
    with open(MANIFEST) as f:
        manifest = json.load(f)
    runs = {name: load_run(name, r) for name, r in manifest["runs"].items()}
    md = write_markdown(runs, manifest["quick"], manifest["total_s"], manifest["date"],
                        manifest.get("commit"))
    with open(output, "w") as f:
        f.write(md.rstrip() + "\n")
    print(f"wrote {output} from {MANIFEST}")


def previous_runs(quick: bool) -> dict:
    """The last run's sections (for --only), or none if there is no such run of the same kind."""
    try:
        with open(MANIFEST) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        return {}
    if manifest.get("quick") != quick:
        return {}
    runs = {}
    for name, record in manifest["runs"].items():
        record = {"date": manifest.get("date"), "commit": manifest.get("commit"), **record}
        try:
            runs[name] = load_run(name, record)
        except (OSError, ValueError):
            pass  # its files are gone: the section is left out
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: fewer sizes and repeats")
    parser.add_argument("--only", nargs="+", default=None, help="scripts to run (default: all)")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per script")
    parser.add_argument("--output", default=OUTPUT)
    parser.add_argument("--render-only", action="store_true",
                        help="rewrite BENCHMARKS.md from benchmarks/results/ without running")
    args = parser.parse_args()
    os.makedirs(common.RESULTS, exist_ok=True)
    if args.render_only:
        if os.path.exists(os.path.join(common.RESULTS, "allreduce_multiprocess.json")):
            subprocess.run([sys.executable, os.path.join(HERE, "plot_allreduce.py"), "--png", PLOT],
                           cwd=common.ROOT, check=False)
        return render_only(args.output)
    t0 = time.time()
    commit, date = git_commit(), time.strftime("%Y-%m-%d %H:%M %Z")
    runs = previous_runs(args.quick) if args.only else {}
    for name, script, full_extra, quick_extra, required in BENCHMARKS:
        if args.only and name not in args.only and script not in args.only:
            continue
        if args.quick and quick_extra is None:
            continue
        runs[name] = run_one(name, script, quick_extra if args.quick else full_extra, args.quick,
                             args.timeout)
        runs[name].update(date=date, commit=commit)
        if required and runs[name]["status"] == "missing":
            raise SystemExit(f"benchmarks/{script} is missing")
    runs = {name: runs[name] for name, *_ in BENCHMARKS if name in runs}  # the usual order
    if runs.get("allreduce_multiprocess", {}).get("status") == "ok":
        subprocess.run([sys.executable, os.path.join(HERE, "plot_allreduce.py"), "--png", PLOT],
                       cwd=common.ROOT, check=False)
    manifest = {"quick": args.quick, "total_s": time.time() - t0, "commit": commit, "date": date,
                "runs": {n: {k: v for k, v in r.items() if k not in ("markdown", "result")}
                         for n, r in runs.items()}}
    with open(MANIFEST, "w") as f:
        json.dump(manifest, f, indent=1)
    md = write_markdown(runs, args.quick, manifest["total_s"], manifest["date"], manifest["commit"])
    with open(args.output, "w") as f:
        f.write(md.rstrip() + "\n")
    print(f"wrote {args.output} ({(time.time() - t0) / 60:.1f} min)")
    if any(r["status"] not in ("ok", "missing") for r in runs.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
