"""Fault tolerance measured: lost work, time to resume, goodput, checkpoint cost (one run, sections).

Every job is the seeds' model (Dense 784->256 relu, Dropout 0.2, Dense 128
relu, Dense 10 softmax; adam), global batch 128, NumPy input in a fixed
order, run by ``benchmarks/fault_tolerance_worker.py`` under
``tfx-dist-run --max-restarts K``; the workers log timestamps of their
phases to files and the figures come from those (the job itself is unchanged).

* ``lost``: a 3-epoch fit of 100 steps each, a step-level save every
  ``--save-freq`` S steps; a process signals itself (a real kill -9 or
  SIGTERM through the kernel) right after step ``--stop-step``; the launcher
  restarts the job. Steps recomputed = steps trained in all runs - 300.
  Side by side: ``tfx`` (2 workers, tfx_dist.MultiWorkerMirroredStrategy +
  StepCheckpoint(save_freq=S)), ``keras`` (Keras's own
  ``keras.callbacks.BackupAndRestore(save_freq=S)`` under TensorFlow's own
  one-process ``tf.distribute.MirroredStrategy`` on 2 logical CPUs: TF
  2.21's MultiWorkerMirroredStrategy does not run Keras 3's ``fit``) and
  ``none`` (the same without a backup).
* ``resume`` (from the same runs): the kill (or SIGTERM) to the first
  trained step after the restart, in phases, next to the cold start of the
  same job (the launcher's start to the first step).
* ``goodput``: 2- and 3-worker fits of ``--goodput-steps`` steps, a worker
  (round robin) SIGKILLed every ``--kill-every`` seconds of the job's wall
  time, restarted by the launcher: steps per second of the whole job against
  the same job with no failure.
* ``cost``: StepCheckpoint's step-level save (every worker's part, fsync,
  SHA-256 manifest, rename, LATEST.json) of the seeds' model and of a
  ``--table-rows``-row ShardedEmbedding table sharded over 2 workers
  (tfx_dist.HybridStrategy, Adagrad: rows and slots): time and bytes.

    python benchmarks/fault_tolerance.py [--sections lost goodput cost] [--quick]

The machine's load average is recorded with every job.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
WORKER = os.path.join(HERE, "fault_tolerance_worker.py")


def load() -> float:
    return round(os.getloadavg()[0], 1)


def read_events(folder: str) -> list[dict]:
    events = []
    for path in glob.glob(os.path.join(folder, "*.jsonl")):
        with open(path) as f:
            events += [json.loads(line) for line in f if line.strip()]
    return sorted(events, key=lambda e: e["t"])


def run_job(mode: str, workers: int, env_extra: dict, timeout: float, kill_every: float | None = None,
            max_restarts: int = 3) -> dict:
    """One launcher job (restarts included); its events, exit code, wall time and load."""
    folder = tempfile.mkdtemp(prefix=f"tfx_ft_{mode}-")
    ckpt = os.path.join(folder, "ckpt")
    env = dict(os.environ, FT_EVENTS=folder, FT_MODE=mode, FT_CKPT=ckpt, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]), **env_extra)
    command = [sys.executable, "-m", "tfx_dist.run", "-n", str(workers), "--max-restarts", str(max_restarts),
               "--checkpoint-dir", ckpt, "--timeout", str(int(timeout)), sys.executable, WORKER]
    load_before = load()
    start = time.time()
    proc = subprocess.Popen(command, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    kills = []
    done = threading.Event()

    def killer():  # SIGKILL a worker of the current run every kill_every seconds
        victim = 0
        while not done.wait(kill_every):
            pids = {}
            current = max((e["restart"] for e in read_events(folder) if e["event"] == "top"), default=0)
            for e in read_events(folder):
                if e["event"] == "top" and e["restart"] == current:
                    pids[e["rank"]] = e["pid"]
            target = pids.get(victim % workers)
            victim += 1
            if target is None:
                continue
            try:
                os.kill(target, signal.SIGKILL)
                kills.append({"t": time.time(), "rank": (victim - 1) % workers, "restart": current})
            except ProcessLookupError:
                pass

    thread = threading.Thread(target=killer, daemon=True) if kill_every else None
    if thread:
        thread.start()
    output, _ = proc.communicate(timeout=timeout + 60)
    done.set()
    end = time.time()
    events = read_events(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return {"mode": mode, "workers": workers, "rc": proc.returncode, "start": start, "end": end,
            "events": events, "kills": kills, "load_before": load_before, "load_after": load(),
            "env": env_extra, "tail": output[-3000:] if proc.returncode else ""}


PHASES = [("exec", "process start (launcher, fork/exec)"), ("top", "Python start"),
          ("tf", "TensorFlow + Keras + tfx_dist import"), ("strategy", "strategy (rendezvous)"),
          ("restore_begin", "model, compile, fit's setup"), ("restore_end", "restore"),
          ("first_step", "first step (trace, dropped batches)")]


def phases(job: dict, restart: int, origin: float) -> dict:
    """Rank 0's phase ends of one run, seconds after ``origin`` (the kill or the launcher's start)."""
    mine = [e for e in job["events"] if e["restart"] == restart and e["rank"] == 0]
    first = {}
    for e in mine:
        if e["event"] == "step":
            first.setdefault("first_step", e["t"])
        else:
            first.setdefault(e["event"], e["t"])
    return {name: first[name] - origin for name, _ in PHASES if name in first}


def lost_and_resume(job: dict, total_steps: int, steps_per_epoch: int) -> dict:
    steps = [e for e in job["events"] if e["event"] == "step" and e["rank"] == 0]
    signalled = [e for e in job["events"] if e["event"] == "signal"]
    restarts = sorted({e["restart"] for e in job["events"]})
    out = {"rc": job["rc"], "trained": len(steps), "recomputed": len(steps) - total_steps,
           "runs": len(restarts), "load": [job["load_before"], job["load_after"]],
           "cold": phases(job, 0, job["start"])}
    if signalled and len(restarts) > 1:
        out["signal_step"] = signalled[0]["it"]
        resumed = [e for e in job["events"] if e["event"] == "fit_begin" and e["restart"] == 1]
        out["resumed_from"] = resumed[0]["it"] if resumed else None
        out["resume"] = phases(job, 1, signalled[0]["t"])
        if out["resumed_from"] is not None and job["mode"] == "keras":
            # Keras restores the weights of the save but replays its epoch from the first batch.
            out["seen_twice"] = out["resumed_from"] % steps_per_epoch
        else:
            out["seen_twice"] = 0
    return out


def section_lost(args) -> dict:
    total = args.steps_per_epoch * 3
    env = {"FT_STEPS_PER_EPOCH": str(args.steps_per_epoch), "FT_EPOCHS": "3",
           "FT_SAVE_FREQ": str(args.save_freq)}
    cases = [("tfx", 2, "1", "KILL"), ("tfx", 2, "1", "TERM"), ("keras", 1, "0", "KILL"),
             ("keras", 1, "0", "TERM"), ("none", 1, "0", "KILL")]
    results = []
    for repeat in range(args.repeats):
        for mode, workers, rank, sig in cases:
            job = run_job(mode, workers, dict(env, FT_STOP=f"{rank}:{args.stop_step}:{sig}"),
                          args.timeout)
            row = dict(lost_and_resume(job, total, args.steps_per_epoch), mode=mode, workers=workers,
                       signal=sig, repeat=repeat)
            if job["rc"] != 0:
                row["tail"] = job["tail"]
            print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
            results.append(row)
    return {"cases": results, "total_steps": total, "save_freq": args.save_freq, "stop_step": args.stop_step}


def section_goodput(args) -> dict:
    env = {"FT_STEPS_PER_EPOCH": "100", "FT_EPOCHS": str(args.goodput_steps // 100),
           "FT_SAVE_FREQ": str(args.save_freq)}
    results = []
    for repeat in range(args.repeats):
        for workers in (2, 3):
            for kill_every in (None, args.kill_every):
                job = run_job("tfx", workers, env, args.timeout * 3, kill_every=kill_every, max_restarts=20)
                wall = job["end"] - job["start"]
                steps = [e for e in job["events"] if e["event"] == "step" and e["rank"] == 0]
                useful = (args.goodput_steps // 100) * 100
                row = {"workers": workers, "kill_every": kill_every, "rc": job["rc"], "wall_s": wall,
                       "useful_steps": useful, "trained": len(steps), "kills": len(job["kills"]),
                       "runs": len({e["restart"] for e in job["events"]}), "steps_per_s": useful / wall,
                       "load": [job["load_before"], job["load_after"]], "repeat": repeat}
                if job["rc"] != 0:
                    row["tail"] = job["tail"]
                print(json.dumps({k: v for k, v in row.items() if k != "tail"}), flush=True)
                results.append(row)
    return {"cases": results, "kill_every": args.kill_every, "steps": args.goodput_steps}


def section_cost(args) -> dict:
    env = {"FT_TABLE_ROWS": str(args.table_rows), "FT_TABLE_DIM": str(args.table_dim),
           "FT_REPEATS": str(args.save_repeats)}
    job = run_job("cost", 2, env, args.timeout * 2, max_restarts=0)
    saves = [e for e in job["events"]
             if e["event"] in ("saved", "restored", "saved_async") and e["rank"] == 0]
    out = {"rc": job["rc"], "saves": saves, "rows": args.table_rows, "dim": args.table_dim,
           "load": [job["load_before"], job["load_after"]]}
    if job["rc"] != 0:
        out["tail"] = job["tail"]
    print(json.dumps({k: v for k, v in out.items() if k != "tail"}), flush=True)
    return out


# ----------------------------------------------------------------------------- markdown

def _s(x) -> str:
    return "-" if x is None else f"{x:.1f} s"


def _phase_table(rows: list[tuple[str, dict]]) -> str:
    from common import table

    header = ["run"] + [label for _, label in PHASES] + ["total"]
    body = []
    for label, ends in rows:
        cells, last = [], 0.0
        for name, _ in PHASES:
            if name in ends:
                cells.append(f"{ends[name] - last:.1f}")
                last = ends[name]
            else:
                cells.append("-")
        body.append([label] + cells + [f"**{last:.1f}**"])
    return table(header, body)


LABELS = {"tfx": "tfx_dist StepCheckpoint, 2 workers (MultiWorkerMirroredStrategy)",
          "keras": "Keras BackupAndRestore, tf.distribute.MirroredStrategy (1 process, 2 CPUs)",
          "none": "no backup, tf.distribute.MirroredStrategy (1 process, 2 CPUs)"}


def markdown(report: dict) -> str:
    from common import table

    lines = ["## Fault tolerance: lost work, time to resume, goodput, checkpoint cost", "",
             f"{report['machine']}. **Taken under load**: {report['cores']} cores shared by other "
             f"jobs; each figure carries the load average (1 min) before/after its job. Absolute "
             f"seconds are far above an idle machine's; compare the rows of one table.", ""]
    lost = report.get("lost")
    if lost:
        rows = []
        for c in lost["cases"]:
            rows.append([LABELS[c["mode"]], "kill -9" if c["signal"] == "KILL" else "SIGTERM",
                         c.get("signal_step", "-"), c.get("resumed_from", "-"), c["trained"],
                         f"**{c['recomputed']}**", c.get("seen_twice", "-"), c["rc"],
                         f"{c['load'][0]}/{c['load'][1]}"])
        lines += [f"### Lost work per failure (save every {lost['save_freq']} steps)", "",
                  f"A fit of 3 epochs x {lost['total_steps'] // 3} steps; the process signals itself "
                  f"(through the kernel) right after step {lost['stop_step']}; the launcher "
                  f"(`--max-restarts`) reruns the job. Steps recomputed = steps trained in all runs - "
                  f"{lost['total_steps']}.", "",
                  table(["backup", "signal", "signalled after step", "resumed at step (optimizer)",
                         "steps trained", "steps recomputed", "batches the weights saw twice", "exit",
                         "load"], rows), ""]
        resume_rows = []
        for c in lost["cases"]:
            if c["repeat"] == 0 or c["mode"] == "tfx":
                sig = "kill -9" if c["signal"] == "KILL" else "SIGTERM"
                resume_rows.append((f"{c['mode']}: cold start (load {c['load'][0]})", c["cold"]))
                if "resume" in c:
                    resume_rows.append((f"{c['mode']}: {sig} -> first step after restart", c["resume"]))
        lines += ["### Time to resume", "",
                  "Seconds of each phase on rank 0, from the signal (or the launcher's start for a cold "
                  "start) to the first trained step. `process start` after a failure includes the "
                  "launcher noticing the exit, stopping the other workers (SIGTERM, then SIGKILL after "
                  "`--grace-period`) and starting the job again; after a SIGTERM it includes the save.",
                  "", _phase_table(resume_rows), ""]
    goodput = report.get("goodput")
    if goodput:
        rows = []
        base = {}
        for c in goodput["cases"]:
            if c["kill_every"] is None:
                base[(c["workers"], c["repeat"])] = c["steps_per_s"]
        for c in goodput["cases"]:
            key = (c["workers"], c["repeat"])
            ratio = c["steps_per_s"] / base[key] if key in base and c["kill_every"] else None
            kills = "none" if c["kill_every"] is None else f"every {c['kill_every']:.0f} s"
            rows.append([c["workers"], kills, c["kills"], c["runs"], f"{c['wall_s']:.0f} s", c["trained"],
                         f"{c['steps_per_s']:.1f}", "-" if ratio is None else f"**{ratio:.2f}**", c["rc"],
                         f"{c['load'][0]}/{c['load'][1]}"])
        lines += [f"### Goodput under kills ({goodput['steps']} steps, save every {report['save_freq']})", "",
                  "Useful steps per second of the whole job (launcher start to end, restarts included) "
                  "with a worker (round robin) SIGKILLed every T seconds of wall time, against the same "
                  "job without failures.", "",
                  table(["workers", "kills", "kills made", "runs", "wall", "steps trained",
                         "useful steps/s", "goodput vs no failure", "exit", "load"], rows), ""]
    cost = report.get("cost")
    if cost:
        rows = []
        for what in ("seeds_model", "table"):
            saves = [s for s in cost["saves"] if s["what"] == what and s["event"] == "saved"]
            restored = [s for s in cost["saves"] if s["what"] == what and s["event"] == "restored"]
            if not saves:
                continue
            label = ("the seeds' model (weights, Adam's slots)" if what == "seeds_model" else
                     f"ShardedEmbedding {cost['rows']:,} x {cost['dim']} over 2 workers "
                     f"(rows + Adagrad slot)")
            rows.append([label, f"{saves[0]['bytes'] / 2**20:.1f} MiB",
                         " / ".join(f"{s['seconds']:.2f}" for s in saves) + " s",
                         f"{restored[0]['seconds']:.2f} s" if restored else "-"])
        asynchronous = [s for s in cost["saves"] if s["event"] == "saved_async"]
        if asynchronous:
            rows.append(["the seeds' model, `AsyncStepCheckpoint`: the step waits (until committed)",
                         f"{asynchronous[0]['bytes'] / 2**20:.1f} MiB",
                         " / ".join(f"{s['seconds']:.3f} ({s['committed']:.2f})" for s in asynchronous)
                         + " s",
                         "-"])
        lines += ["### Checkpoint cost (step-level save, 2 workers, tfx_dist.HybridStrategy)", "",
                  f"StepCheckpoint's own save called on both workers (every worker's part, fsync, SHA-256 "
                  f"manifest, rename, LATEST.json); load {cost['load'][0]}/{cost['load'][1]}.", "",
                  table(["state", "bytes", "save (each repeat)", "restore"], rows), ""]
    lines.append(f"*Command: `python benchmarks/fault_tolerance.py {report['argv']}` "
                 f"(run {report['when']}).*")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sections", nargs="+", choices=("lost", "goodput", "cost"),
                        default=["lost", "goodput", "cost"])
    parser.add_argument("--quick", action="store_true", help="small table, short goodput jobs")
    parser.add_argument("--steps-per-epoch", type=int, default=100)
    parser.add_argument("--save-freq", type=int, default=20)
    parser.add_argument("--stop-step", type=int, default=159)
    parser.add_argument("--goodput-steps", type=int, default=1500)
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--table-rows", type=int, default=10_000_000)
    parser.add_argument("--table-dim", type=int, default=16)
    parser.add_argument("--save-repeats", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=400)
    parser.add_argument("--out")
    parser.add_argument("--render", metavar="JSON", help="rewrite the markdown of an earlier run's JSON")
    args = parser.parse_args()
    if args.render:
        import common

        with open(args.render) as f:
            report = json.load(f)
        common.write_outputs("fault_tolerance", report, markdown(report), args.render)
        return
    if args.quick:
        args.goodput_steps, args.kill_every, args.table_rows = 600, 40.0, 1_000_000
    import common

    info = common.machine_info()
    report = {"argv": " ".join(sys.argv[1:]), "save_freq": args.save_freq, "cores": info["cores"],
              "machine": f"{info['machine']}, {info['cores']} cores", "load_start": load()}
    for name in args.sections:
        report[name] = {"lost": section_lost, "goodput": section_goodput, "cost": section_cost}[name](args)
    report["when"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    report["load_end"] = load()
    out, md = common.write_outputs("fault_tolerance", report, markdown(report), args.out)
    print(open(md).read())


if __name__ == "__main__":
    main()
