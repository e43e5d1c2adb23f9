"""Ctrl-C while a worker waits in a collective: it fails at once, not at TFX_TIMEOUT_S.

Two plain ``python`` workers (TF_CONFIG, no launcher). The waiter enters an
all-reduce alone (numpy, eager, tf.function, Keras fit); once it is blocked
(its CPU time stops moving) it gets SIGINT. Before the fix it sat there
until TFX_TIMEOUT_S (60 s here) and, in fit, the message was lost behind a
pybind11 error. Now KeyboardInterrupt (in a tf.function: TensorFlow's
CancelledError) must come within 1 s, naming the collective; the late peer
then enters the collective and must fail at once with an error naming the
interrupted rank.
"""

import os
import signal
import threading
import time

import pytest

from workers import start_workers, wait_workers

pytestmark = pytest.mark.reliability

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts", "ctrl_c.py")
TIMEOUT_S = 60  # what the waiter would have waited before the fix


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _wait_until_blocked(proc, lines: list, deadline: float) -> None:
    """Until the waiter printed WAITING and then used no CPU for a second
    (it sits in the collective, not in Python or tracing)."""
    while not any(line.strip() == "WAITING" for line in lines):
        assert proc.poll() is None and time.monotonic() < deadline, f"waiter never got to wait: {lines}"
        time.sleep(0.05)
    last, quiet_since = _cpu_seconds(proc.pid), time.monotonic()
    while time.monotonic() - quiet_since < 1.0:
        assert proc.poll() is None and time.monotonic() < deadline, f"waiter never blocked: {lines}"
        time.sleep(0.2)
        now = _cpu_seconds(proc.pid)
        if now - last > 0.03:
            quiet_since = time.monotonic()
        last = now


@pytest.mark.parametrize("scenario,waiter", [("numpy", 0), ("eager", 1), ("function", 0), ("fit", 1)])
def test_ctrl_c_stops_a_worker_waiting_in_a_collective(scenario, waiter, tmp_path, reliability):
    shared = tmp_path / "shared"
    shared.mkdir()
    procs, _ = start_workers(open(SCRIPT).read(), 2, str(tmp_path / "job"),
                             extra_env={"SCENARIO": scenario, "WAITER": waiter, "SHARED": str(shared),
                                        "TFX_TIMEOUT_S": TIMEOUT_S})
    waiter_proc = procs[waiter]
    lines: list = []
    # Read the waiter's stdout as it comes; wait_workers gets the rest.
    reader = threading.Thread(target=lambda: lines.extend(iter(waiter_proc.stdout.readline, "")), daemon=True)
    try:
        reader.start()
        _wait_until_blocked(waiter_proc, lines, time.monotonic() + 180)
        sent = time.time()
        waiter_proc.send_signal(signal.SIGINT)
        waiter_proc.wait(timeout=30)
        reader.join(timeout=10)
        (shared / "go").touch()
        peer = wait_workers([procs[1 - waiter]], timeout_s=60)[0]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    stderr = waiter_proc.stderr.read()
    interrupted = [line for line in lines if line.startswith("INTERRUPTED ")]
    assert interrupted, f"no KeyboardInterrupt (rc {waiter_proc.returncode}):\n{''.join(lines)}\n{stderr[-3000:]}"
    _, when, message = interrupted[0].rstrip("\n").split(" ", 2)
    detected = float(when) - sent
    peer_lines = [line for line in peer.stdout.splitlines() if line.startswith("PEER_ERROR ")]
    assert peer_lines, peer.describe()
    _, peer_s, peer_error = peer_lines[0].split(" ", 2)
    def short(text):  # from the runtime's own words on
        return text[text.find("tfx_dist rank"):] if "tfx_dist rank" in text else text

    reliability(f"SIGINT to rank {waiter} waiting alone in an all-reduce ({scenario}), no launcher",
                f"{message.split(':', 1)[0]} after {detected:.2f} s: {short(message)[:200]}; the late peer failed after "
                f"{float(peer_s):.2f} s ({peer_error.split(':', 1)[0]}): {short(peer_error)[:200]}", detected_s=round(detected, 3),
                lost="the interrupted collective (the communicator is broken on both ranks)")
    # A collective inside a tf.function fails with TensorFlow's error type
    # (CancelledError), naming the same; the handler's KeyboardInterrupt
    # comes 10 ms later, when the program is still running then.
    expected = "CancelledError" if scenario == "function" else "KeyboardInterrupt"
    assert message.startswith(expected + ":"), message
    assert waiter_proc.returncode == (131 if scenario == "function" else 130), stderr[-3000:]
    assert detected < 1.0, message
    assert f"tfx_dist rank {waiter}: interrupted (SIGINT, Ctrl-C) while waiting in collective '" in message
    if scenario != "fit":
        assert "ctrl_c_sum" in message
    assert "pybind11" not in stderr, stderr[-3000:]
    # The peer is told, not left to time out.
    assert float(peer_s) < 10, peer_error
    assert f"tfx_dist rank {waiter}: interrupted" in peer_error

