"""No shared-memory segment is left in /dev/shm when ranks die.

Before: ~1 in 100 launcher kills early in a 4-worker job left a 2 MiB
``tfx_comm_*`` segment (a rank killed between creating its segment and the
peer's mapping of it). The window cannot be closed by ordering (the peer needs
the name), so segments of dead creators are swept by the launcher when the
job ends and by every new communicator.
"""

import json
import os
import random
import subprocess
import sys
import textwrap
import time

import pytest

from tfx_dist.cluster.shm_segments import SHM_DIR, sweep_dead_segments

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN_PY = os.path.join(ROOT, "tfx_dist", "run.py")
pytestmark = pytest.mark.reliability

WORKER = textwrap.dedent("""\
    import json, os, random, signal, sys, threading, time
    sys.path.insert(0, {root!r})
    print(f"pid {{os.getpid()}}", flush=True)
    info = json.loads(os.environ["TF_CONFIG"])
    rank, addresses = info["task"]["index"], info["cluster"]["worker"]
    delay = float(os.environ["KILL_AFTER_S"])
    if rank == int(os.environ["VICTIM"]):  # dies at a random moment of the start-up
        threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    from tfx_dist.comm import Communicator
    comm = Communicator(rank, len(addresses), addresses, timeout_s=20)
    time.sleep(30)  # the victim's death ends the job
""")


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_the_sweep_removes_only_dead_creators_segments(tmp_path):
    dead, alive = _dead_pid(), os.getpid()
    names = [f"tfx_comm_{dead}_00ff", f"tfx-probe-{dead}-abcd", f"tfx_comm_{alive}_00ff", "other_file"]
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    assert sorted(sweep_dead_segments(str(tmp_path))) == sorted(names[:2])
    assert sorted(os.listdir(tmp_path)) == sorted(names[2:])


def _trials(n, reliability):
    left, times = [], []
    rng = random.Random(19)
    for trial in range(n):
        worker = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tfx_shm_kill_{os.getpid()}.py")
        with open(worker, "w") as f:
            f.write(WORKER.format(root=ROOT))
        env = dict(os.environ, VICTIM=str(rng.randrange(4)), KILL_AFTER_S=f"{rng.uniform(0.2, 1.5):.3f}",
                   PYTHONUNBUFFERED="1")
        t0 = time.monotonic()
        result = subprocess.run([sys.executable, RUN_PY, "-n", "4", "--grace-period", "1", sys.executable,
                                 worker], capture_output=True, text=True, timeout=90, env=env)
        times.append(time.monotonic() - t0)
        assert result.returncode != 0, result.stdout[-2000:]
        pids = {line.split()[-1] for line in result.stdout.splitlines() if " pid " in f" {line}"}
        pids = {p for p in pids if p.isdigit()}
        leftovers = [n for n in os.listdir(SHM_DIR)
                     if any(n.startswith((f"tfx_comm_{p}_", f"tfx-probe-{p}-")) for p in pids)]
        left.extend(leftovers)
    reliability(f"{n} 4-worker jobs, one rank SIGKILLed 0.2-1.5 s after start (rendezvous and "
                f"shared-memory handshake), launcher stops the others",
                f"{len(left)} segments left in {SHM_DIR}; {sum(times) / n:.1f} s per job",
                lost="the job (as intended); no /dev/shm space")
    assert left == [], left


def test_no_segment_left_when_ranks_are_killed_early(reliability):
    _trials(5, reliability)  # ~5 s per job here; `long` runs 150


@pytest.mark.long
def test_no_segment_left_over_many_kills(reliability):
    _trials(150, reliability)
