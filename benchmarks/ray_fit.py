"""The 2-worker fit of the seeds' model under Ray Train against the same job under tfx-dist-run.

    PYTHONPATH=. python3 benchmarks/ray_fit.py [--pairs 2] [--epochs 6]

Starts a local Ray cluster (a head and one worker node with 2 CPUs, `ray start`),
then alternates the two ways of running the job (tests/ray/jobs.py: ``mwms``
through ``TensorflowTrainer`` + ``tfx_dist.ray.TfxConfig``; ``plain`` under
``tfx-dist-run -n 2``), and once TensorFlow's own ``MultiWorkerMirroredStrategy``
under Ray's own ``TensorflowConfig``. Reports examples/s of ``fit`` itself (rank
0's clock) and the wall time of the whole job (Ray: ``trainer.fit()``, from the
driver; tfx-dist-run: the launcher's process). Writes benchmarks/results/ray.md.
"""

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO_ROOT, "tests", "ray"))

from ray_cluster import RayCluster, node_env  # noqa: E402

JOBS = os.path.join(REPO_ROOT, "tests", "ray", "jobs.py")


def _result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    return json.loads(lines[-1][len("RESULT "):]) if lines else {"error": "no RESULT line"}


def under_ray(cluster, case, epochs):
    out = tempfile.mkdtemp(prefix=f"ray-bench-{case}-")
    env = dict(node_env(), RAY_JOB_EPOCHS=str(epochs))
    proc = subprocess.run([sys.executable, JOBS, case, cluster.address, out], env=env, capture_output=True,
                          text=True, timeout=900)
    result = _result(proc.stdout)
    if result.get("error") or not result.get("fit"):
        return {"error": (result.get("error") or proc.stderr[-500:]).strip().splitlines()[-1][:300]}
    fit = result["fit"]
    return {"examples_per_s": fit["examples"] / fit["fit_s"], "wall_s": result["trainer_s"]}


def under_tfx_dist_run(epochs):
    out = tempfile.mkdtemp(prefix="ray-bench-plain-")
    env = dict(node_env(), RAY_JOB_EPOCHS=str(epochs))
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, JOBS, "plain",
                           "-", out], env=env, capture_output=True, text=True, timeout=900)
    wall = time.monotonic() - start
    if proc.returncode:
        return {"error": proc.stderr[-300:]}
    with open(os.path.join(out, "fit.json")) as f:
        fit = json.load(f)
    return {"examples_per_s": fit["examples"] / fit["fit_s"], "wall_s": wall}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--out", default=os.path.join(REPO_ROOT, "benchmarks", "results", "ray.md"))
    args = parser.parse_args()
    import ray

    cluster = RayCluster(worker_cpus=(2,))
    rows = []
    try:
        load = os.getloadavg()[0]
        for pair in range(args.pairs):
            rows.append(("Ray Train, TensorflowTrainer + tfx_dist.ray.TfxConfig", pair,
                         under_ray(cluster, "mwms", args.epochs)))
            rows.append(("tfx-dist-run -n 2", pair, under_tfx_dist_run(args.epochs)))
        rows.append(("Ray Train, TensorFlow's own MultiWorkerMirroredStrategy", 0,
                     under_ray(cluster, "tf-own", args.epochs)))
        load_after = os.getloadavg()[0]
    finally:
        cluster.stop()
    lines = [
        "# tfx_dist under Ray Train against tfx-dist-run: the seeds' model, 2 workers",
        "",
        f"`PYTHONPATH=. python3 benchmarks/ray_fit.py --pairs {args.pairs} --epochs {args.epochs}` "
        f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, Ray {ray.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} cores, load average {load:.1f} "
        f"before, {load_after:.1f} after). The same training function (tests/ray/jobs.py), sklearn's "
        f"digits (1,400 examples), global batch 128, {args.epochs} epochs, one thread pool per worker as "
        "TensorFlow chooses. Ray: a head and one worker node (2 CPUs) on this machine. examples/s: "
        "`fit` itself on rank 0's clock; wall: the whole job (Ray: `trainer.fit()` from the driver, "
        "with the start of the worker actors, TensorFlow's import and the teardown; tfx-dist-run: the "
        "launcher's process).",
        "",
        "| run | order | fit examples/s | job wall s |",
        "|---|---|---|---|",
    ]
    for name, pair, r in rows:
        if "error" in r:
            lines.append(f"| {name} | {pair} | fails: {r['error']} | |")
        else:
            lines.append(f"| {name} | {pair} | {r['examples_per_s']:.0f} | {r['wall_s']:.1f} |")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
