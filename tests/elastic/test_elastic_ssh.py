"""Elastic workers started over real ssh: an OpenSSH server on 127.0.0.2 (another host to the
launcher), logged into with a key, as Horovod's elastic driver reaches its hosts.

The discovery script lists this host with one slot and 127.0.0.2 with two; the worker on 127.0.0.2
is killed mid-run, the survivors go on, and its replacement starts there through ssh again. The
job secret travels on ssh's standard input, never on a command line (ssh's, sshd's or the shell's).
Skips where OpenSSH's server is not installed or this user cannot run it.
"""

import os
import shutil
import socket
import subprocess
import time

import pytest

import elastic_job
from test_elastic_hosts import WORKER, Watch, assert_survivors_went_on, discovery_script

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
HOST = "127.0.0.2"


def _skip_reason():
    if not os.path.exists(SSHD) or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        return "OpenSSH (openssh-server, openssh-client) is not installed"
    if os.geteuid() != 0:
        return "sshd logs in other users only when it runs as root"
    return ""


def _free_port():
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


@pytest.fixture
def ssh_server(tmp_path):
    """An sshd on HOST:port taking one key; yields the remote shell that logs in with it."""
    keys = tmp_path / "ssh"
    keys.mkdir()
    for name in ("host", "user"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(keys / name)], check=True)
    shutil.copy(keys / "user.pub", keys / "authorized_keys")
    port = _free_port()
    (keys / "sshd_config").write_text(
        f"ListenAddress {HOST}:{port}\nHostKey {keys}/host\nAuthorizedKeysFile {keys}/authorized_keys\n"
        "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
        f"StrictModes no\nPidFile {keys}/sshd.pid\n")
    host_key = (keys / "host.pub").read_text().split()[:2]
    (keys / "known_hosts").write_text(f"[{HOST}]:{port} {' '.join(host_key)}\n")
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege separation directory
    server = subprocess.Popen([SSHD, "-D", "-e", "-f", str(keys / "sshd_config")],
                              stdout=subprocess.DEVNULL, stderr=open(keys / "sshd.log", "w"))
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((HOST, port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    pytest.fail("sshd did not start: " + (keys / "sshd.log").read_text()[-2000:])
                time.sleep(0.1)
        yield (f"ssh -o BatchMode=yes -o UserKnownHostsFile={keys}/known_hosts -p {port} "
               f"-i {keys}/user"), keys / "sshd.log"
    finally:
        server.terminate()
        server.wait(10)


@pytest.mark.skipif(bool(_skip_reason()), reason=_skip_reason() or "runs")
def test_workers_over_ssh_are_replaced_over_ssh(tmp_path, ssh_server):
    shell, sshd_log = ssh_server
    script, _ = discovery_script(tmp_path, f"127.0.0.1:1\n{HOST}:2\n")
    watch = Watch()
    code, done, steps, output, _ = elastic_job.run_killing_one(
        WORKER, victim="w1", timeout=120, env={"ELASTIC_STEPS": "120", "ELASTIC_STEP_S": "0.1"},
        extra_args=["--host-discovery-script", script, "--remote-shell", shell],
        on_step=lambda name, pid, gen, step: watch.first_sight(name, pid))
    assert code == 0, output[-4000:]
    assert set(done) == {"w0", "w2", "w3"}, output[-4000:]
    assert {name: seen["address"].split(":")[0] for name, seen in watch.seen.items()} == {
        "w0": "127.0.0.1", "w1": HOST, "w2": HOST, "w3": HOST}
    assert "worker w1 was killed by SIGKILL" in output and f"started worker w3 on {HOST}" in output
    assert sshd_log.read_text().count("Accepted publickey for") == 3   # w1, w2 and w3 logged in
    assert watch.secret_in_argv == []
    assert_survivors_went_on(done, steps, output, ("w0", "w2"), {
        "w0": [[1, 0, 2, []], [2, 0, 3, [2]]], "w2": [[1, 1, 2, []], [2, 1, 3, [2]]]})
