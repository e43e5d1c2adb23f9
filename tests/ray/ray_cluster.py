"""A real local Ray cluster for the tests: a head and worker nodes, each a `ray start` process.

Small on purpose (the machine is shared): 1 CPU per node unless asked, 80 MB of
object store, no dashboard unless asked. Every node gets this checkout on
PYTHONPATH, so the actors import tfx_dist and the tests' modules from here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OBJECT_STORE_BYTES = 80 * 1024 * 1024


def ray_missing() -> str | None:
    if shutil.which("ray") is None:
        return "ray is not installed (pip install 'ray[train]'; `make ray` does)"
    return None


def node_env(extra: dict | None = None) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")]),
               TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", RAY_TRAIN_V2_ENABLED="1",
               RAY_USAGE_STATS_ENABLED="0", TF_CPU_ALLOCATOR_USE_BFC="true")
    for name in ("TF_CONFIG", "TFX_JOB_SECRET", "RAY_ADDRESS"):
        env.pop(name, None)
    env.update(extra or {})
    return env


class RayCluster:
    """``ray start --head`` plus ``worker_cpus`` worker nodes (one per entry), torn down by `stop`."""

    def __init__(self, worker_cpus=(1, 1), head_cpus: int = 0, dashboard: bool = False):
        self.temp_dir = tempfile.mkdtemp(prefix="tfxray-", dir="/tmp")
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        head = ["--head", f"--port={self.port}", "--node-ip-address=127.0.0.1",
                f"--temp-dir={self.temp_dir}", f"--include-dashboard={str(dashboard).lower()}"]
        if dashboard:
            self.dashboard_port = _free_port()
            head += ["--dashboard-host=127.0.0.1", f"--dashboard-port={self.dashboard_port}"]
        try:
            self._start(head, head_cpus)
            for cpus in worker_cpus:
                self.add_node(cpus)
        except BaseException:
            self.stop()
            raise

    def add_node(self, cpus: int, env: dict | None = None, ray: str = "ray") -> None:
        """Starts a worker node; ``ray``: the `ray` command of another Python environment (its
        workers then run that environment's packages)."""
        self._start([f"--address={self.address}", "--node-ip-address=127.0.0.1"], cpus, env, ray)

    def _start(self, args, cpus, env=None, ray="ray"):
        proc = subprocess.run([ray, "start", *args, f"--num-cpus={cpus}", "--num-gpus=0",
                               f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats"],
                              env=node_env(env), capture_output=True, text=True, timeout=120)
        if proc.returncode:
            raise RuntimeError(f"ray start {' '.join(args)} failed: {proc.stderr[-3000:]}")

    def kill_node(self, node_id: str) -> list[int]:
        """Kills one node as a lost machine would vanish: SIGKILL to its raylet and every process
        under it (the worker actors, its agents). Returns the pids killed."""
        raylets = [pid for pid in _pids_of(f"--node_id={node_id}") if _is_raylet(pid)]
        if len(raylets) != 1:
            raise RuntimeError(f"node {node_id}: found raylet(s) {raylets}")
        doomed = [raylets[0]] + _descendants(raylets[0])
        for pid in doomed:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        return doomed

    def stop(self) -> None:
        # `ray stop` stops every Ray on the machine; this cluster's processes only:
        # those whose command line names its temp dir or its GCS port.
        for pid in _pids_of(self.temp_dir, f":{self.port}"):
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _pids_of(*marks: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(mark in cmdline for mark in marks):
            found.append(int(name))
    return found


def _is_raylet(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "raylet"
    except OSError:
        return False


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
