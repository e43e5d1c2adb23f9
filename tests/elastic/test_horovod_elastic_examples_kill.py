"""Horovod's elastic examples (examples/horovod/elastic/, only the import and the data changed)
under `tfx-dist-run --elastic --min-workers 2 --max-workers 3`: worker w1 killed with SIGKILL
mid-run, the job still ends with exit 0. Shortened by the test to a few dozen steps."""

import os
import re
import signal
import subprocess
import sys
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
EXAMPLES = os.path.join(ROOT, "examples", "horovod", "elastic")
CASES = {  # example -> (its lengths -> the test's, the line of w1 after which w1 is killed)
    "tensorflow2_keras_mnist_elastic.py": (
        [("steps_per_epoch=500 // hvd.size()", "steps_per_epoch=30 // hvd.size()"),
         ("epochs=24-state.epoch", "epochs=3-state.epoch")], r"^\[w1\] Epoch 2/"),
    "tensorflow2_mnist_elastic.py": (
        [("take(10000 // hvd.size())", "take(90 // hvd.size())")], r"^\[w0\] Step #10\b"),
}


def _pid_of(worker: str, parent: int):
    """The pid of the launcher's child process that runs elastic worker ``worker``."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            if ppid != parent:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if f"TFX_ELASTIC_WORKER={worker}".encode() in f.read().split(b"\0"):
                    return int(pid)
        except (OSError, ValueError, IndexError):
            continue
    return None


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_survives_a_killed_worker(name, tmp_path):
    changes, trigger = CASES[name]
    with open(os.path.join(EXAMPLES, name)) as f:
        text = f.read()
    for old, new in changes:
        assert old in text
        text = text.replace(old, new)
    script = tmp_path / name
    script.write_text(text)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, EXAMPLES]))
    proc = subprocess.Popen([sys.executable, "-m", "tfx_dist.run", "--elastic", "--min-workers", "2",
                             "--max-workers", "3", sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp_path)
    timer = threading.Timer(500, proc.kill)
    timer.start()
    lines, killed = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            for part in line.split("\r"):  # Keras's progress bar rewrites its line
                if not killed and re.search(trigger, part.strip()):
                    pid = _pid_of("w1", proc.pid)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        killed = True
        proc.wait()
    finally:
        timer.cancel()
    output = "".join(lines)
    assert killed, output[-4000:]
    assert proc.returncode == 0, output[-6000:]
    assert "worker w1 was killed by SIGKILL" in output, output[-4000:]
