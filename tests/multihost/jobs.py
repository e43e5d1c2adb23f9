"""Runs a tfx_dist job's worker processes on simulated hosts (see hosts.py)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time

from hosts import SimulatedHosts, wait_all

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
SCRIPTS = os.path.join(HERE, "scripts")
BASE_PORT = 23456


@dataclasses.dataclass
class Worker:
    rank: int
    host: int
    returncode: int | None   # None: killed at the timeout
    stdout: str
    stderr: str

    def _line(self, prefix: str):
        for line in self.stdout.splitlines():
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
        return None

    @property
    def result(self) -> dict:
        value = self._line("RESULT ")
        if value is None:
            raise AssertionError(f"worker {self.rank} reported nothing.\n{self.describe()}")
        return value

    @property
    def error(self) -> dict | None:
        return self._line("ERROR ")

    def describe(self) -> str:
        return (f"--- worker {self.rank} on host {self.host}: exit code {self.returncode} ---\n"
                f"stdout:\n{self.stdout[-3000:]}\nstderr (tail):\n{self.stderr[-4000:]}")


def worker_addresses(hosts: SimulatedHosts, layout: list[int]) -> list[tuple[int, str]]:
    """(host, "address:port") of every rank: ``layout[h]`` workers on host h, in host order."""
    return [(h, f"{hosts.hosts[h].address}:{BASE_PORT + local}")
            for h, count in enumerate(layout) for local in range(count)]


def tf_config(addresses: list[str], index: int) -> str:
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def base_env(workdir: str, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env.update({"PYTHONPATH": os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")]), "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1",
                "TFX_JOB_SECRET": "multihost-test-secret", "WORKDIR": workdir,
                "OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                "TF_NUM_INTEROP_THREADS": "2"})
    env.pop("TF_CONFIG", None)
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def start(hosts: SimulatedHosts, script: str, placements: list[tuple[int, dict]], workdir: str):
    """Starts ``script`` once per (host, environment) in ``placements``; returns the processes."""
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(SCRIPTS, script)
    procs = []
    for rank, (host, env) in enumerate(placements):
        procs.append(hosts.popen(host, [sys.executable, path], cwd=workdir, env=dict(env, RANK=str(rank)),
                                 stdout=-1, stderr=-1, text=True))
    return procs


def run(hosts: SimulatedHosts, script: str, layout: list[int], workdir: str,
        env: dict | None = None, timeout_s: float = 90, addresses=None) -> list[Worker]:
    """Runs ``script`` with ``layout[h]`` workers on host h (TF_CONFIG naming the hosts' addresses)."""
    placed = worker_addresses(hosts, layout)
    addresses = addresses or [a for _, a in placed]
    placements = [(h, dict(base_env(workdir, env), TF_CONFIG=tf_config(addresses, i)))
                  for i, (h, _) in enumerate(placed)]
    return finish(start(hosts, script, placements, workdir), [h for h, _ in placements], timeout_s)


def finish(procs, host_of: list[int], timeout_s: float) -> list[Worker]:
    outputs = wait_all(procs, timeout_s)
    return [Worker(i, host_of[i], rc, out, err) for i, (rc, out, err) in enumerate(outputs)]


def check(workers: list[Worker]) -> list[dict]:
    """Every worker's result; raises with every worker's output if one failed."""
    if any(w.returncode != 0 for w in workers):
        raise AssertionError("\n".join(w.describe() for w in workers))
    return [w.result for w in workers]


def wait_for_lines(path: str, count: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(path) as f:
                if sum(1 for _ in f) >= count:
                    return True
        except FileNotFoundError:
            pass
        time.sleep(0.1)
    return False
