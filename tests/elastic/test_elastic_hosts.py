"""tfx-dist-run --elastic starts workers on every host --host-discovery-script lists, on the other hosts
through the remote shell (numpy workers: no TensorFlow, a few seconds each).

- On simulated hosts (network namespaces, tests/multihost/hosts.py): the launcher runs on host 0,
  the discovery script lists hosts 0, 1 and 2 (one slot each), the remote shell enters hosts 1
  and 2. A worker on host 1 is killed mid-run; the survivors keep their processes, a replacement
  starts on host 1 and joins, the job exits 0 and every sum was right.
- On one machine (127.0.0.2 counts as another host): a remote worker killed and replaced, then
  the host's slots cut by the discovery script: its newest worker is stopped, a lost worker; and
  a remote worker dies with a launcher killed by SIGKILL though its remote shell does not.

Both check that each worker runs where it should (its network namespace, its TF_CONFIG) and that
the job secret is on no process's command line.
"""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

import elastic_job

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "multihost"))

import hosts as simulated  # noqa: E402

WORKER = os.path.join(HERE, "numpy_elastic_worker.py")


def environ_of(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)


def command_lines_holding(secret):
    """The pids whose command line holds ``secret``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if secret in f.read():
                    found.append(int(pid))
        except OSError:
            pass  # exited meanwhile
    return found


class Watch:
    """What the test learns of each worker process while it runs (on its first STEP line)."""

    def __init__(self):
        self.seen = {}          # name -> {"pid", "net", "address"}
        self.secret_in_argv = []  # pids whose command line held the job secret

    def first_sight(self, name, pid):
        if name in self.seen:
            return
        try:
            env = environ_of(pid)
            self.seen[name] = {"pid": pid, "net": os.readlink(f"/proc/{pid}/ns/net"),
                               "address": json.loads(env[b"TF_CONFIG"])["cluster"]["worker"][0]}
        except (OSError, KeyError):
            return  # gone already
        self.secret_in_argv += command_lines_holding(env[b"TFX_JOB_SECRET"])  # this worker's shells too


def remote_shell_script(tmp_path, anchors):
    """A remote shell: ``shell HOST COMMAND-LINE`` runs the line on the simulated host HOST."""
    cases = "".join(f"  {address}) pid={pid};;\n" for address, pid in anchors.items())
    path = tmp_path / "remote-shell"
    path.write_text("#!/bin/sh\n" + f"echo \"$1\" >> {tmp_path}/remote.log\n"
                    f"case \"$1\" in\n{cases}  *) echo \"no host $1\" >&2; exit 255;;\nesac\n"
                    "exec nsenter -t \"$pid\" --net --ipc --mount -- sh -c \"$2\"\n")
    path.chmod(0o755)
    return str(path)


def discovery_script(tmp_path, text):
    listing = tmp_path / "hosts.txt"
    listing.write_text(text)
    path = tmp_path / "discover"
    path.write_text(f"#!/bin/sh\ncat {listing}\n")
    path.chmod(0o755)
    return str(path), listing


def assert_survivors_went_on(done, steps, output, survivors, resets):
    pids = {}
    for name, pid, _, _, _ in steps:
        pids.setdefault(name, set()).add(pid)
    assert all(len(p) == 1 for p in pids.values()), output[-4000:]   # no worker process restarted
    for name in survivors:
        assert done[name]["pid"] in pids[name]
        assert [r[:4] for r in done[name]["resets"]] == resets[name], output[-4000:]
    assert all(d["wrong"] == 0 and d["step"] == 120 for d in done.values()), output[-4000:]


@pytest.mark.skipif(bool(simulated.skip_reason()), reason=str(simulated.skip_reason()))
def test_workers_start_on_the_listed_hosts_and_a_lost_one_is_replaced_there(tmp_path):
    with simulated.SimulatedHosts(3) as net:
        addresses = [h.address for h in net.hosts]
        shell = remote_shell_script(tmp_path, {h.address: h.anchor.pid for h in net.hosts[1:]})
        script, _ = discovery_script(tmp_path, "".join(f"{a}:1\n" for a in addresses))
        watch = Watch()
        code, done, steps, output, _ = elastic_job.run_killing_one(
            WORKER, victim="w1", timeout=120, env={"ELASTIC_STEPS": "120"},
            extra_args=["--host-discovery-script", script, "--remote-shell", shell],
            launcher_prefix=net.command(0, [], cwd=elastic_job.ROOT),
            on_step=lambda name, pid, gen, step: watch.first_sight(name, pid))
        nets = [os.readlink(f"/proc/{h.anchor.pid}/ns/net") for h in net.hosts]
    assert code == 0, output[-4000:]
    assert f"driver at {addresses[0]}:" in output          # the address toward the hosts, found
    assert set(done) == {"w0", "w2", "w3"}, output[-4000:]
    # w0 on the launcher's host, w1 and its replacement w3 on host 1, w2 on host 2.
    where = {"w0": 0, "w1": 1, "w2": 2, "w3": 1}
    assert set(watch.seen) == set(where), output[-4000:]
    for name, host in where.items():
        assert watch.seen[name]["net"] == nets[host], name
        assert watch.seen[name]["address"].startswith(addresses[host] + ":"), name
    assert "worker w1 was killed by SIGKILL" in output
    assert f"started worker w3 on {addresses[1]}" in output
    assert (tmp_path / "remote.log").read_text().split() == [addresses[1], addresses[2], addresses[1]]
    assert watch.secret_in_argv == []
    assert_survivors_went_on(done, steps, output, ("w0", "w2"), {
        "w0": [[1, 0, 2, []], [2, 0, 3, [2]]], "w2": [[1, 1, 2, []], [2, 1, 3, [2]]]})


def test_a_host_that_offers_fewer_slots_loses_its_newest_worker(tmp_path):
    # 127.0.0.2 is another host to the launcher; the "remote shell" runs the line here.
    shell = tmp_path / "remote-shell"
    shell.write_text(f"#!/bin/sh\necho \"$1\" >> {tmp_path}/remote.log\nexec sh -c \"$2\"\n")
    shell.chmod(0o755)
    script, listing = discovery_script(tmp_path, "127.0.0.1:1\n127.0.0.2:2\n")
    watch = Watch()

    def on_step(name, pid, generation, step):
        watch.first_sight(name, pid)
        if name == "w3" and generation == 2 and "127.0.0.2:2" in listing.read_text():
            listing.write_text("127.0.0.1:1\n127.0.0.2:1\n")  # the host gives a slot back

    code, done, steps, output, _ = elastic_job.run_killing_one(
        WORKER, victim="w1", timeout=120, env={"ELASTIC_STEPS": "120", "ELASTIC_STEP_S": "0.1"},
        extra_args=["--min-workers", "1", "--host-discovery-script", script, "--remote-shell", str(shell)],
        on_step=on_step)
    assert code == 0, output[-4000:]
    assert set(done) == {"w0", "w2"}, output[-4000:]
    assert {name: seen["address"].split(":")[0] for name, seen in watch.seen.items()} == {
        "w0": "127.0.0.1", "w1": "127.0.0.2", "w2": "127.0.0.2", "w3": "127.0.0.2"}
    assert (tmp_path / "remote.log").read_text().split() == ["127.0.0.2"] * 3
    assert "host 127.0.0.2 offers 1 slot(s) now: stopping worker w3 there (a lost worker)" in output
    assert "worker w3 was killed by SIGKILL" in output and "started worker w4" not in output
    assert watch.secret_in_argv == []
    assert_survivors_went_on(done, steps, output, ("w0", "w2"), {
        "w0": [[1, 0, 2, []], [2, 0, 3, [2]], [3, 0, 2, []]],
        "w2": [[1, 1, 2, []], [2, 1, 3, [2]], [3, 1, 2, []]]})


def test_a_remote_worker_dies_with_a_killed_launcher(tmp_path):
    # A remote shell that, like ssh, neither dies with the launcher nor passes a signal on; the
    # worker's output goes to a file (no write to a closed pipe stops it) and it has no peer whose
    # loss would stop it: it learns of the launcher's death from the end of its input.
    out = tmp_path / "remote.out"
    shell = tmp_path / "remote-shell"
    shell.write_text(f"#!/bin/sh\nexec setsid --wait sh -c \"$2\" > {out}\n")
    shell.chmod(0o755)
    script, _ = discovery_script(tmp_path, "127.0.0.2:1\n")
    env = dict(os.environ, PYTHONPATH=elastic_job.ROOT, ELASTIC_STEPS="100000", ELASTIC_STEP_S="0.1")
    proc = subprocess.Popen([sys.executable, "-m", "tfx_dist.run", "--elastic", "--max-workers", "1",
                             "--host-discovery-script", script, "--remote-shell", str(shell),
                             sys.executable, WORKER], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=env, cwd=elastic_job.ROOT)
    pid = None
    try:
        deadline = time.monotonic() + 60
        while pid is None and time.monotonic() < deadline:
            steps = [line for line in out.read_text().splitlines() if line.startswith("STEP")] \
                if out.exists() else []
            pid = int(steps[0].split()[2]) if steps else None
            time.sleep(0.05)
        assert pid is not None, "the remote worker made no step"
        proc.kill()  # SIGKILL: the launcher cleans nothing up itself
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not running(pid)
    finally:
        if pid is not None and running(pid):
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def running(pid):
    """True while ``pid`` exists and is no zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_remote_shells_command_line():
    from tfx_dist.launcher.remote_shell import RemoteShell, forwarded_environment
    line = "cd /x; exec python3 -m tfx_dist.launcher.remote_worker"
    assert RemoteShell().argv("node1", line) == ["ssh", "-o", "BatchMode=yes", "node1", line]
    assert RemoteShell(None, 2222, "/k/id").argv("node1", line) == [
        "ssh", "-o", "BatchMode=yes", "-p", "2222", "-i", "/k/id", "node1", line]
    assert RemoteShell("ip netns exec {host} sh -c").argv("h1", line) == [
        "ip", "netns", "exec", "h1", "sh", "-c", line]
    assert forwarded_environment({"HOME": "/root", "SSH_AUTH_SOCK": "s", "PATH": "/bin",
                                  "TFX_JOB_SECRET": "k"}) == {"PATH": "/bin", "TFX_JOB_SECRET": "k"}
