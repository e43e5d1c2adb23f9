"""Starts real worker processes for multi-worker tests.

TensorFlow keeps one runtime per process, and TF's ``multi_process_runner``
does not work under pytest, so each test here starts N plain ``python``
processes, each with its own ``TF_CONFIG`` (free loopback ports, chief =
worker 0) and a shared ``TFX_JOB_SECRET``, and waits for all of them under a
hard timeout. A worker reports results by printing one line
``RESULT <json>`` (see :func:`report`); :func:`run_workers` returns them by rank.

A worker script is a Python source string. It runs with the repository root on
``sys.path`` and is given ``WORKDIR`` (a folder shared by all workers of the
test) in its environment.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULT_PREFIX = "RESULT "


def free_ports(n: int) -> list[int]:
    """Returns ``n`` distinct ports that were free on 127.0.0.1 a moment ago."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def launch_script(script: str, env: dict, num_workers: int = 2, num_ps: int = 0,
                  grace_period: float = 5.0, options: tuple = (),
                  timeout_s: int = 240) -> tuple[subprocess.CompletedProcess, float]:
    """Runs a worker script under ``tfx-dist-run -n num_workers --ps num_ps *options`` (this folder
    importable, ``env`` added); returns the finished process, whatever its exit status, and its wall
    time."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **env,
               PYTHONPATH=os.pathsep.join([REPO_ROOT, os.path.dirname(os.path.abspath(__file__))]))
    start = time.monotonic()
    launcher = [sys.executable, "-m", "tfx_dist.run", "-n", str(num_workers), "--ps", str(num_ps),
                "--grace-period", str(grace_period)]
    result = subprocess.run(launcher + [*options, "--timeout", str(timeout_s), sys.executable, script],
                            capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=timeout_s + 60)
    return result, time.monotonic() - start


def launch_with_restarts(script: str, env: dict, checkpoint_dir, num_workers: int, num_ps: int = 0,
                         max_restarts: int = 2) -> tuple[subprocess.CompletedProcess, float, list[str]]:
    """`launch_script` under ``--max-restarts`` (restarts counted from ``checkpoint_dir``'s step);
    asserts the job ended 0 after exactly ``max_restarts`` restarts; returns it, its wall time and
    the launcher's line for each restart."""
    job, wall_s = launch_script(script, env, num_workers, num_ps, grace_period=30, timeout_s=400, options=(
        "--max-restarts", str(max_restarts), "--checkpoint-dir", str(checkpoint_dir)))
    log = job.stdout + job.stderr
    assert job.returncode == 0, log[-4000:]
    restarts = [line for line in job.stderr.splitlines() if "restarting the job" in line]
    assert len(restarts) == max_restarts, log[-4000:]
    return job, wall_s, restarts


def rank0_reports(result: subprocess.CompletedProcess) -> list:
    """Every value rank 0 passed to `report` in a job run by `launch_script`, in order."""
    rank0 = re.compile(r"^\[ *0\] " + RESULT_PREFIX)  # labels padded to the longest ("ps0")
    lines = [rank0.sub("", line) for line in result.stdout.splitlines() if rank0.match(line)]
    assert lines, f"rc {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return [json.loads(line) for line in lines]


def rank0_report(result: subprocess.CompletedProcess):
    """The last value rank 0 passed to `report` in a job run by `launch_script`."""
    return rank0_reports(result)[-1]


def run_example(script: str, *args: str, num_workers: int = 2) -> subprocess.CompletedProcess:
    """Runs ``examples/<script>`` the way users run it, under ``tfx-dist-run -n num_workers``;
    asserts it exits 0 and returns the finished process (its output as text)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.pathsep.join([REPO_ROOT, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "tfx_dist.run", "-n", str(num_workers), "--timeout", "240", "--",
         sys.executable, os.path.join(REPO_ROOT, "examples", script), *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def mpirun_missing() -> str | None:
    """Why tests that start ``mpirun`` without TF_CONFIG cannot run here, or None if they can."""
    import shutil

    if shutil.which("mpirun") is None:
        return "mpirun not found (scripts/setup.sh installs Debian's openmpi-bin)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed (scripts/setup.sh: pip install mpi4py)"
    return None


def tf_config(addresses: list[str], index: int) -> str:
    """The ``TF_CONFIG`` of worker ``index`` of a cluster of plain workers."""
    return json.dumps({"cluster": {"worker": addresses},
                       "task": {"type": "worker", "index": index}})


def ps_cluster_envs(num_workers: int, num_ps: int) -> list[dict]:
    """Per-process TF_CONFIG of a cluster with parameter servers: the workers first, then the ps tasks."""
    ports = free_ports(num_workers + num_ps)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports[:num_workers]],
               "ps": [f"127.0.0.1:{p}" for p in ports[num_workers:]]}
    tasks = [("worker", i) for i in range(num_workers)] + [("ps", i) for i in range(num_ps)]
    return [{"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": t, "index": i}})}
            for t, i in tasks]


def report(value) -> None:
    """Called inside a worker: hands ``value`` (JSON-serializable) back to the test."""
    print(RESULT_PREFIX + json.dumps(value), flush=True)


@dataclasses.dataclass
class WorkerResult:
    rank: int
    returncode: int | None  # None: killed at the timeout
    stdout: str
    stderr: str
    results: list  # every value the worker passed to report(), in order

    @property
    def result(self):
        """The last reported value (most scripts report once)."""
        if not self.results:
            raise AssertionError(f"worker {self.rank} reported nothing.\n{self.describe()}")
        return self.results[-1]

    def describe(self) -> str:
        return (f"--- worker {self.rank}: exit code {self.returncode} ---\n"
                f"stdout (tail):\n{self.stdout[-3000:]}\nstderr (tail):\n{self.stderr[-6000:]}")


class WorkersFailed(AssertionError):
    pass


def _worker_env(index: int, addresses: list[str], workdir: str, extra_env: dict | None) -> dict:
    env = dict(os.environ)
    env["TF_CONFIG"] = tf_config(addresses, index)
    env.setdefault("TFX_JOB_SECRET", "tfx-dist-test-secret")
    env["WORKDIR"] = workdir
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT, os.path.dirname(os.path.abspath(__file__))]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if extra_env:
        env.update({k: str(v) for k, v in extra_env.items()})
    return env


def start_workers(script: str, num_workers: int, workdir: str, extra_env: dict | None = None,
                  per_rank_env: list[dict] | None = None,
                  addresses: list[str] | None = None) -> tuple[list[subprocess.Popen], list[str]]:
    """Starts the workers and returns (processes, addresses) without waiting."""
    os.makedirs(workdir, exist_ok=True)
    script_path = os.path.join(workdir, "worker_script.py")
    with open(script_path, "w") as f:
        f.write(script)
    if addresses is None:
        addresses = [f"127.0.0.1:{p}" for p in free_ports(num_workers)]
    procs = []
    for i in range(num_workers):
        env = _worker_env(i, addresses, workdir, extra_env)
        if per_rank_env:
            env.update({k: str(v) for k, v in per_rank_env[i].items()})
        procs.append(subprocess.Popen(
            [sys.executable, script_path], cwd=workdir, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True))
    return procs, addresses


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def wait_workers(procs: list[subprocess.Popen], timeout_s: float,
                 kill_on_failure: bool = True) -> list[WorkerResult]:
    """Waits for every worker; kills all of them once ``timeout_s`` has passed
    or (``kill_on_failure``) as soon as one has failed (its peers would
    otherwise hang in a collective); without it, the others must stop by
    themselves, which is what a failure test checks."""
    deadline = time.monotonic() + timeout_s
    outputs: dict[int, tuple[str, str]] = {}
    # Drain pipes in threads so a chatty worker never blocks on a full pipe.
    import threading

    def drain(i, p):
        outputs[i] = p.communicate()

    threads = [threading.Thread(target=drain, args=(i, p), daemon=True)
               for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    timed_out = set()
    while any(t.is_alive() for t in threads):
        if time.monotonic() > deadline:
            timed_out = {i for i, p in enumerate(procs) if p.poll() is None}
            for p in procs:
                _kill(p)
            break
        if kill_on_failure and any(p.poll() not in (None, 0) for p in procs):
            time.sleep(5)  # let the peers print their own error first
            for p in procs:
                _kill(p)
            break
        time.sleep(0.1)
    for t in threads:
        t.join(timeout=30)
    results = []
    for i, p in enumerate(procs):
        out, err = outputs.get(i, ("", ""))
        reported = [json.loads(line[len(RESULT_PREFIX):]) for line in out.splitlines()
                    if line.startswith(RESULT_PREFIX)]
        rc = None if i in timed_out else p.returncode
        results.append(WorkerResult(i, rc, out, err, reported))
    return results


def run_workers(script: str, num_workers: int, workdir: str, timeout_s: float = 120,
                extra_env: dict | None = None, per_rank_env: list[dict] | None = None,
                check: bool = True) -> list[WorkerResult]:
    """Runs ``script`` on ``num_workers`` worker processes and returns their results.

    Raises:
      WorkersFailed: (with ``check``) a worker exited non-zero or ran past ``timeout_s``;
        the message holds every worker's exit code and output tail.
    """
    procs, _ = start_workers(script, num_workers, workdir, extra_env, per_rank_env)
    results = wait_workers(procs, timeout_s)
    if check and any(r.returncode != 0 for r in results):
        raise WorkersFailed(f"{num_workers} workers, timeout {timeout_s}s:\n"
                            + "\n".join(r.describe() for r in results))
    return results
