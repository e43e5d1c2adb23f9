"""Runs an elastic job under tfx-dist-run --elastic, kills one worker with SIGKILL mid-run, and
collects what the workers printed (STEP / DONE lines, see numpy_elastic_worker.py)."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_killing_one(worker_script, victim="w1", kill_at_step=10, timeout=240, extra_args=(), env=None,
                    launcher_prefix=(), on_step=None):
    """Returns (launcher exit code, {worker: DONE json}, [(worker, pid, generation, rank, size)], output,
    seconds from the kill to the survivors' next completed step).

    ``launcher_prefix``: argv the launcher's command runs under (a simulated host's nsenter);
    ``on_step(name, pid, generation, step)``: called for every STEP line."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, PYTHONUNBUFFERED="1", TF_CPP_MIN_LOG_LEVEL="2")
    full_env.update(env or {})
    cmd = [sys.executable, "-m", "tfx_dist.run", "--elastic", "--min-workers", "2", "--max-workers", "3",
           *extra_args, sys.executable, worker_script]
    proc = subprocess.Popen([*launcher_prefix, *cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=full_env, cwd=ROOT)
    lines, done, steps = [], {}, set()
    killed_at = [None, None]  # time of the kill, time of the next step a survivor completed
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            words = line.split()
            if len(words) >= 8 and words[1] == "STEP":
                name, pid, gen, rank, size, step = words[2], int(words[3]), *map(int, words[4:8])
                steps.add((name, pid, gen, rank, size))
                if on_step is not None:
                    on_step(name, pid, gen, step)
                if killed_at[0] is not None and killed_at[1] is None and name != victim and gen > 0:
                    killed_at[1] = time.monotonic()
                if name == victim and step >= kill_at_step and killed_at[0] is None:
                    os.kill(pid, signal.SIGKILL)
                    killed_at[0] = time.monotonic()
            elif len(words) >= 4 and words[1] == "DONE":
                done[words[2]] = dict(json.loads(line.split(None, 4)[4]), pid=int(words[3]))
        proc.wait()
    finally:
        timer.cancel()
    recovery = None if None in killed_at else killed_at[1] - killed_at[0]
    return proc.returncode, done, sorted(steps), "".join(lines), recovery
