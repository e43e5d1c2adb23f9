"""Tests of tfx-dist-run (tfx_dist/run.py, tfx_dist/launcher/) with real worker processes.

The launcher runs as ``python tfx_dist/run.py``: the module uses the standard
library only, so this skips importing the tfx_dist package (which loads
TensorFlow). One test runs the real ``python -m tfx_dist.run`` entry point.
The worker scripts import no TensorFlow, to stay fast.
"""

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tfx_dist import cluster
from tfx_dist import run as launcher
from tfx_dist.launcher import ports as ports_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_PY = os.path.join(ROOT, "tfx_dist", "run.py")
BAR = "━"


def script(tmp_path, body, name="worker.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent("""\
        import json, os, signal, sys, time
        RANK = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
        """) + textwrap.dedent(body))
    return str(path)


def launch(*args, timeout=60, env=None):
    start = time.monotonic()
    result = subprocess.run([sys.executable, RUN_PY, *args], capture_output=True, text=True,
                            timeout=timeout, env=env)
    return result, time.monotonic() - start


def lines_of(text, rank):
    prefix = f"[{rank}] "
    return [line[len(prefix):] for line in text.splitlines() if line.startswith(prefix)]


def assert_dead(pid):
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


REPORT = """
    print(json.dumps({"tf_config": os.environ["TF_CONFIG"], "secret": os.environ.get("TFX_JOB_SECRET"),
                      "passed": os.environ.get("TFX_TEST_PASSED"), "pid": os.getpid(),
                      "bfc": os.environ.get("TF_CPU_ALLOCATOR_USE_BFC"),
                      "restart_count": os.environ.get("TFX_RESTART_COUNT")}))
"""


@pytest.mark.parametrize("n", [2, 3])
def test_each_worker_gets_its_tf_config_and_the_shared_secret(tmp_path, n):
    env = dict(os.environ, TFX_TEST_PASSED="through")
    result, _ = launch("-n", str(n), sys.executable, script(tmp_path, REPORT), env=env)
    assert result.returncode == 0, result.stderr
    reports = [json.loads(lines_of(result.stdout, rank)[0]) for rank in range(n)]
    infos = [cluster.parse_tf_config(r["tf_config"]) for r in reports]
    assert [info.rank for info in infos] == list(range(n))
    assert [info.is_chief for info in infos] == [True] + [False] * (n - 1)
    addresses = infos[0].worker_addresses
    assert len(addresses) == n and all(info.worker_addresses == addresses for info in infos)
    assert all(a.startswith("127.0.0.1:") for a in addresses)
    assert len({a.split(":")[1] for a in addresses}) == n  # unique ports
    secrets_seen = {r["secret"] for r in reports}
    assert len(secrets_seen) == 1 and re.fullmatch(r"[0-9a-f]{64}", secrets_seen.pop())
    assert all(r["passed"] == "through" for r in reports)  # the environment passes through
    assert all(r["bfc"] == "true" for r in reports)  # TensorFlow's caching CPU allocator
    assert all(r["restart_count"] == "0" for r in reports)  # the first run of the job


def test_parameter_server_tasks(tmp_path):
    """--ps P: P more tasks of type ps in every TF_CONFIG, shown as [ps0]..., the same secret."""
    result, _ = launch("-n", "2", "--ps", "2", sys.executable, script(tmp_path, REPORT))
    assert result.returncode == 0, result.stderr
    labels = ["0", "1", "ps0", "ps1"]
    reports = [json.loads(lines_of(result.stdout, label.rjust(3))[0]) for label in labels]
    configs = [json.loads(r["tf_config"]) for r in reports]
    assert [c["task"] for c in configs] == [{"type": "worker", "index": 0}, {"type": "worker", "index": 1},
                                            {"type": "ps", "index": 0}, {"type": "ps", "index": 1}]
    cluster_ = configs[0]["cluster"]
    assert len(cluster_["worker"]) == 2 and len(cluster_["ps"]) == 2
    assert len(set(cluster_["worker"] + cluster_["ps"])) == 4  # every task has its own port
    assert all(c["cluster"] == cluster_ for c in configs)
    assert len({r["secret"] for r in reports}) == 1
    info = cluster.parse_tf_config(reports[2]["tf_config"])
    assert info.task_type == "ps" and info.ps_addresses == tuple(cluster_["ps"])


def test_users_allocator_choice_is_kept(tmp_path):
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="false")
    result, _ = launch("-n", "1", sys.executable, script(tmp_path, REPORT), env=env)
    assert json.loads(lines_of(result.stdout, 0)[0])["bfc"] == "false"


def test_each_job_gets_a_fresh_secret(tmp_path):
    worker = script(tmp_path, REPORT)
    secrets_seen = [json.loads(lines_of(launch("-n", "1", sys.executable, worker)[0].stdout, 0)[0])
                    ["secret"] for _ in range(2)]
    assert secrets_seen[0] != secrets_seen[1]


def test_port_base_and_host(tmp_path):
    port = launcher.pick_ports("127.0.0.1", 2)[0]
    result, _ = launch("-n", "2", "--port-base", str(port), "--host", "127.0.0.1",
                       sys.executable, script(tmp_path, REPORT))
    assert result.returncode == 0, result.stderr
    info = cluster.parse_tf_config(json.loads(lines_of(result.stdout, 1)[0])["tf_config"])
    assert info.worker_addresses == (f"127.0.0.1:{port}", f"127.0.0.1:{port + 1}")


def test_port_base_in_use_is_refused(tmp_path):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result, _ = launch("-n", "2", "--port-base", str(port), sys.executable,
                           script(tmp_path, REPORT))
    assert result.returncode == 2
    assert f"port(s) [{port}] on 127.0.0.1 are in use" in result.stderr
    assert result.stdout == ""


def test_pick_ports_are_free_distinct_and_below_the_ephemeral_range():
    ports = launcher.pick_ports("127.0.0.1", 8)
    assert len(set(ports)) == 8
    low = ports_module._ephemeral_range()[0]
    assert all(p < low for p in ports)
    assert all(ports_module._port_is_free("127.0.0.1", p) for p in ports)


AFFINITY = """
    print(json.dumps(sorted(os.sched_getaffinity(0))))
"""


def affinities(result, n):
    return [set(json.loads(lines_of(result.stdout, r)[0])) for r in range(n)]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to share out")
def test_workers_are_bound_to_disjoint_shares_of_the_cpus(tmp_path):
    mine = os.sched_getaffinity(0)
    result, _ = launch("-n", "2", sys.executable, script(tmp_path, AFFINITY))
    assert result.returncode == 0, result.stderr
    first, second = affinities(result, 2)
    assert first and second and not first & second
    assert first | second == mine
    # What the launcher computed for this machine is what the workers got.
    assert [first, second] == [set(c) for c in launcher.cpu_shares(2, mine)]


def test_cpu_bind_none_and_more_workers_than_cpus_leave_workers_floating(tmp_path):
    mine = os.sched_getaffinity(0)
    worker = script(tmp_path, AFFINITY)
    result, _ = launch("-n", "2", "--cpu-bind", "none", sys.executable, worker)
    assert result.returncode == 0, result.stderr
    assert affinities(result, 2) == [mine, mine]
    n = len(mine) + 1
    result, _ = launch("-n", str(n), sys.executable, worker)
    assert result.returncode == 0, result.stderr
    assert affinities(result, n) == [mine] * n


def test_cpu_shares_gives_whole_cores_then_single_cpus():
    def siblings(cpu):  # 8 logical CPUs: cpu and cpu + 4 share a physical core
        return {cpu % 4, cpu % 4 + 4}
    assert launcher.cpu_shares(2, range(8), siblings) == [[0, 1, 4, 5], [2, 3, 6, 7]]
    assert launcher.cpu_shares(3, range(8), siblings) == [[0, 1, 4, 5], [2, 6], [3, 7]]
    assert launcher.cpu_shares(4, range(8), siblings) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    # Fewer cores than workers: single logical CPUs.
    assert launcher.cpu_shares(5, range(8), siblings) == [[0, 1], [2, 3], [4, 5], [6], [7]]
    # Only the CPUs this process may use count, siblings outside them too.
    assert launcher.cpu_shares(2, [1, 5, 2], siblings) == [[1, 5], [2]]
    # Nothing to share out, or too little.
    assert launcher.cpu_shares(1, range(8), siblings) is None
    assert launcher.cpu_shares(9, range(8), siblings) is None
    # No topology: every CPU its own core.
    assert launcher.cpu_shares(3, [0, 1, 2, 3], lambda c: {c}) == [[0, 1], [2], [3]]


def test_every_line_is_prefixed_with_its_rank(tmp_path):
    worker = script(tmp_path, """
        print(f"out a {RANK}")
        print(f"err a {RANK}", file=sys.stderr)
        sys.stdout.write(f"part one {RANK} "); sys.stdout.flush(); time.sleep(0.05)
        print(f"part two {RANK}")
        print(f"multi\\nline {RANK}")
    """)
    result, _ = launch("-n", "2", sys.executable, worker)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        out = lines_of(result.stdout, rank)
        assert f"out a {rank}" in out and f"line {rank}" in out and "multi" in out
        # a line written in two pieces arrives whole unless another rank wrote in between
        assert f"part one {rank} part two {rank}" in out or (
            f"part one {rank} " in out and f"part two {rank}" in out)
        assert lines_of(result.stderr, rank) == [f"err a {rank}"]
    assert all(re.match(r"\[[01]\] ", line) for line in result.stdout.splitlines())


def test_long_lines_written_in_pieces_stay_whole(tmp_path):
    # Both ranks print long lines quickly, each in three flushed writes a few
    # ms apart (print itself writes the text and the newline separately): the
    # launcher used to pass each write on as it came, and another rank's line
    # in between split this one in two.
    worker = script(tmp_path, """
        for i in range(200):
            line = f"{RANK}:{i}:" + "x" * 3000
            for piece in (line[:1000], line[1000:2000], line[2000:]):
                sys.stdout.write(piece); sys.stdout.flush(); time.sleep(0.002)
            print()
    """)
    result, _ = launch("-n", "2", sys.executable, worker)
    assert result.returncode == 0, result.stderr
    for rank in range(2):
        assert lines_of(result.stdout, rank) == [f"{rank}:{i}:" + "x" * 3000
                                                 for i in range(200)]


KERAS_LIKE = """
    # What Keras 3's progress bar writes: "\\b" * previous width + "\\r" + the new bar.
    previous = 0
    print("Epoch 1/1")
    for step in (1, 2, 3):
        bar = f"{step}/3 " + "━" * (step * 4) + " 0s 5ms/step - loss: 0.5"
        sys.stdout.write("\\b" * previous + "\\r" + bar)
        sys.stdout.flush()
        previous = len(bar)
        time.sleep(0.02)
    sys.stdout.write("\\n")
    print(f"done {RANK}")
"""


def test_progress_bars_are_shown_for_rank_0_only(tmp_path):
    result, _ = launch("-n", "2", sys.executable, script(tmp_path, KERAS_LIKE))
    assert result.returncode == 0, result.stderr
    rank0 = lines_of(result.stdout, 0)
    rank1 = lines_of(result.stdout, 1)
    assert any(BAR in line for line in rank0)
    assert "3/3" in result.stdout
    assert rank1 == ["Epoch 1/1", "done 1"]  # no bar, no stray control characters
    assert not any(BAR in line for line in result.stdout.splitlines() if line.startswith("[1]"))


def test_all_progress_shows_every_rank(tmp_path):
    result, _ = launch("-n", "2", "--all-progress", sys.executable, script(tmp_path, KERAS_LIKE))
    assert any(BAR in line for line in lines_of(result.stdout, 1))


def test_a_failing_worker_stops_the_others(tmp_path):
    worker = script(tmp_path, """
        print(f"pid {os.getpid()}", flush=True)
        if RANK == 1:
            time.sleep(0.3)
            print("Traceback: something broke in rank 1", file=sys.stderr)
            print("ValueError: bad batch", file=sys.stderr)
            sys.exit(3)
        time.sleep(60)
    """)
    result, elapsed = launch("-n", "3", sys.executable, worker)
    assert result.returncode == 3
    assert elapsed < 15
    assert "tfx-dist-run: rank 1 failed with exit code 3; stopped the other 2 worker(s)" in result.stderr
    summary = result.stderr.split("rank 1 failed", 1)[1]
    assert "last 2 stderr line(s) of rank 1" in summary
    assert "    ValueError: bad batch" in summary
    for rank in range(3):
        assert_dead(int(lines_of(result.stdout, rank)[0].split()[1]))


def test_workers_ignoring_sigterm_are_killed_after_the_grace_period(tmp_path):
    worker = script(tmp_path, """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print(f"pid {os.getpid()}", flush=True)
        if RANK == 0:
            time.sleep(0.3)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)
    """)
    result, elapsed = launch("-n", "2", "--grace-period", "0.5", sys.executable, worker)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0 was killed by SIGKILL" in result.stderr
    assert elapsed < 15
    assert_dead(int(lines_of(result.stdout, 1)[0].split()[1]))


def test_timeout_stops_all_workers(tmp_path):
    worker = script(tmp_path, """
        print(f"pid {os.getpid()}", flush=True)
        time.sleep(60)
    """)
    result, elapsed = launch("-n", "2", "--timeout", "1", sys.executable, worker)
    assert result.returncode == launcher.EXIT_TIMEOUT
    assert "timed out after 1 s" in result.stderr
    assert 1 <= elapsed < 15
    for rank in range(2):
        assert_dead(int(lines_of(result.stdout, rank)[0].split()[1]))


def test_ctrl_c_stops_all_workers(tmp_path):
    worker = script(tmp_path, """
        print(f"pid {os.getpid()}", flush=True)
        time.sleep(60)
    """)
    proc = subprocess.Popen([sys.executable, RUN_PY, "-n", "2", sys.executable, worker],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pids = []
    try:
        while len(pids) < 2:
            line = proc.stdout.readline()
            assert line, "launcher ended early: " + proc.stderr.read()
            pids.append(int(line.split()[-1]))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT
    assert "received SIGINT; stopped all 2 worker(s)" in err
    for pid in pids:
        assert_dead(pid)


@pytest.mark.parametrize("args,message", [
    (["-n", "2"], "missing the command"),
    (["-n", "0", "true"], "at least 1"),
    (["-n", "2", "--timeout", "0", "true"], "--timeout must be positive"),
    (["true"], "required: -n/--num-workers"),
    (["-n", "2", "--cpu-bind", "sockets", "true"], "invalid choice: 'sockets'"),
    (["-n", "2", "--ps", "-1", "true"], "--ps must be at least 0"),
    (["-n", "2", "--max-restarts", "-1", "true"], "--max-restarts must be at least 0"),
    (["-n", "2", "--min-workers", "3", "--max-restarts", "1", "true"], "--min-workers must be in 1..2"),
    (["-n", "2", "--min-workers", "1", "true"], "--min-workers below -n needs --max-restarts"),
    (["-n", "2", "--slot-failures", "0", "true"], "--slot-failures must be at least 1"),
    (["--elastic", "-n", "2", "--host", "0.0.0.0", "true"], "not every interface (0.0.0.0)"),
    (["--elastic", "-n", "2", "--ssh-port", "22", "true"], "need --host-discovery-script"),
    (["-n", "2", "--remote-shell", "rsh", "true"], "--remote-shell need --elastic"),
])
def test_bad_arguments(args, message):
    result, _ = launch(*args)
    assert result.returncode == 2
    assert message in result.stderr


def test_missing_program_is_reported():
    result, _ = launch("-n", "2", "/nonexistent/program")
    assert result.returncode == 2
    assert "could not start '/nonexistent/program'" in result.stderr


def test_double_dash_and_worker_arguments_pass_through(tmp_path):
    worker = script(tmp_path, "print(sys.argv[1:])")
    result, _ = launch("-n", "1", "--", sys.executable, worker, "--timeout", "7", "-n")
    assert lines_of(result.stdout, 0) == ["['--timeout', '7', '-n']"]


def test_module_entry_point(tmp_path):
    # The real `python -m tfx_dist.run` (what the tfx-dist-run console script runs).
    result = subprocess.run([sys.executable, "-m", "tfx_dist.run", "-n", "2", sys.executable, "-c",
                             "print('hello')"], capture_output=True, text=True, timeout=120,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["[0] hello", "[1] hello"]


def test_the_launcher_loads_no_tensorflow():
    # It starts once per job and must start fast; the workers load TensorFlow, not it.
    check = "import sys, tfx_dist.run; assert 'tensorflow' not in sys.modules, 'tensorflow loaded'"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=60,
                            cwd=ROOT)
    assert result.returncode == 0, result.stderr


# The launcher run from a program that has a thread of its own: no code may run between fork and
# exec there, and the workers must still die with it.
IN_A_THREADED_PROGRAM = ("import runpy, sys, threading, time\n"
                         "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n"
                         "sys.argv = sys.argv[1:]\n"
                         "runpy.run_path(sys.argv[0], run_name='__main__')\n")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
@pytest.mark.parametrize("threaded", [False, True])
def test_workers_die_with_a_killed_launcher(tmp_path, threaded):
    worker = script(tmp_path, """
        print(f"pid {os.getpid()}", flush=True)
        time.sleep(60)
    """)
    runner = [sys.executable, "-c", IN_A_THREADED_PROGRAM] if threaded else [sys.executable]
    proc = subprocess.Popen([*runner, RUN_PY, "-n", "2", sys.executable, worker],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    pids = [int(proc.stdout.readline().split()[-1]) for _ in range(2)]
    proc.kill()  # SIGKILL: the launcher can clean nothing up itself
    proc.wait(timeout=10)
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in pids if _running(pid)]
    for pid in alive:  # don't leave orphans behind when the test fails
        os.kill(pid, signal.SIGKILL)
    assert not alive


def _running(pid):
    """True while ``pid`` exists and is no zombie (an orphan is reaped by init, not by us)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_late_failure_after_others_finished_still_fails_the_job(tmp_path):
    worker = script(tmp_path, """
        if RANK == 1:
            time.sleep(0.5)
            sys.exit(5)
    """)
    result, _ = launch("-n", "2", sys.executable, worker)
    assert result.returncode == 5
    assert "tfx-dist-run: rank 1 failed with exit code 5\n" in result.stderr  # nobody to stop


@pytest.mark.reliability
def test_a_rank_failing_before_it_connects_stops_the_job_at_once(tmp_path, reliability):
    """Rank 0 must not wait TFX_TIMEOUT_S for a peer
    that is already dead; the launcher names the rank that failed."""
    worker = script(tmp_path, """
        sys.path.insert(0, %r)
        if RANK == 1:
            print("bad configuration", file=sys.stderr)
            sys.exit(7)  # before the rendezvous
        from tfx_dist.comm import Communicator
        addresses = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
        print("connecting", flush=True)
        Communicator(RANK, 2, addresses, timeout_s=60)
        print("connected?!", flush=True)
    """ % ROOT)
    result, elapsed = launch("-n", "2", sys.executable, worker, timeout=90)
    reliability("under tfx-dist-run, rank 1 exits with code 7 before the rendezvous; rank 0 waits "
                "for it (TFX_TIMEOUT_S=60)",
                f"the launcher stopped rank 0 and exited {result.returncode} after {elapsed:.1f} s "
                f"(process start included), naming rank 1: "
                + next((line for line in result.stderr.splitlines() if "rank 1" in line), "?"),
                detected_s=round(elapsed, 2), lost="nothing (no training had started)")
    assert result.returncode == 7, result.stderr
    assert "tfx-dist-run: rank 1 failed with exit code 7; stopped the other 1 worker(s)" in result.stderr
    assert "bad configuration" in result.stderr
    assert "connected?!" not in result.stdout
    assert elapsed < 20  # TFX_TIMEOUT_S is 60


# --- Restarts (--max-restarts, --min-workers, --checkpoint-dir) --------------
# The workers: tests/engines/progress_worker.py (what its variables do: there).
PROGRESS = os.path.join(ROOT, "tests", "engines", "progress_worker.py")


def progress_job(tmp_path, *args, ckpt_name="ckpt", **env_vars):
    """Runs PROGRESS under the launcher with --checkpoint-dir; returns the result and every START."""
    ckpt = tmp_path / ckpt_name
    ckpt.mkdir()
    env = dict(os.environ, **env_vars)
    for name in ("TFX_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        env.pop(name, None)
    result, _ = launch("--checkpoint-dir", str(ckpt), *args, sys.executable,
                       PROGRESS, env=env, timeout=90)
    starts = [json.loads(line.split("START ", 1)[1]) for line in result.stdout.splitlines()
              if "] START " in line]
    return result, starts


def restart_lines(result):
    return [line for line in result.stderr.splitlines() if "restarting the job" in line]


def test_a_failed_job_restarts_with_new_ports_and_the_restart_count(tmp_path):
    # Run 0: rank 1 SIGKILLs itself; run 1: it exits 3 after the job made
    # progress; run 2 finishes. --max-restarts 1 counts restarts from the same
    # step: progress between the failures starts the count again.
    result, starts = progress_job(tmp_path, "-n", "2", "--max-restarts", "1",
                                  CRASH="0:1:3:kill,1:1:2:3", STEPS="20")
    assert result.returncode == 0, result.stderr
    lines = restart_lines(result)
    assert len(lines) == 2, result.stderr
    steps = [int(re.search(r"resuming from step (\d+) \(", line).group(1)) for line in lines]
    ckpt = os.path.join(str(tmp_path / "ckpt"), "LATEST.json")
    assert "(TFX_RESTART_COUNT=1): rank 1 was killed by SIGKILL; " in lines[0]
    assert "(TFX_RESTART_COUNT=2): rank 1 failed with exit code 3; " in lines[1]
    assert all(f"({ckpt})" in line and "restart 1 of 1 from this step" in line for line in lines)
    runs = {run: [s for s in starts if s["run"] == run] for run in range(3)}
    assert all(len(runs[run]) == 2 for run in range(3)), starts
    # Each run resumed from the step the launcher named, on ports of its own.
    assert [runs[run][0]["step"] for run in range(3)] == [0] + steps and 0 < steps[0] < steps[1]
    clusters = [runs[run][0]["cluster"] for run in range(3)]
    assert all(s["cluster"] == clusters[s["run"]] for s in starts)
    assert len({tuple(c) for c in clusters}) == 3
    assert lines_of(result.stdout, 0)[-1].startswith("DONE ")  # the last run ends normally
    assert lines_of(result.stdout, 1)[-1].startswith("DONE ")


def test_max_restarts_stops_a_job_that_fails_at_the_same_step(tmp_path):
    # The checkpoint stays at step 2 and rank 1 fails 4 steps after every start.
    result, starts = progress_job(tmp_path, "-n", "2", "--max-restarts", "2",
                                  SAVE_UNTIL="2", CRASH="*:1:4:3")
    assert result.returncode == 3
    assert len(restart_lines(result)) == 2 and len(starts) == 6
    assert [s["step"] for s in starts if s["run"] > 0] == [2] * 4
    assert ("not restarting: the job failed 3 times in a row with no progress in its checkpoint "
            "(step 2; --max-restarts 2)") in result.stderr
    history = result.stderr.split("The runs:", 1)[1]
    assert history.count("rank 1 failed with exit code 3; checkpoint: step 2") == 3


def test_min_workers_continues_without_a_slot_that_keeps_failing(tmp_path):
    # Rank 2 fails at once while the job has 3 workers: after 2 such runs the
    # launcher drops its slot and the job finishes on 2 workers.
    result, starts = progress_job(tmp_path, "-n", "3", "--max-restarts", "1", "--min-workers", "2",
                                  FAIL_RANK="2", FAIL_FROM_WORKERS="3")
    assert result.returncode == 0, result.stderr
    lines = restart_lines(result)
    assert len(lines) == 2
    assert "rank 2 failed 2 runs in a row (--slot-failures 2)" in lines[1]
    assert "continuing with 2 workers instead of 3 (--min-workers 2)" in lines[1]
    assert [(s["run"], s["workers"]) for s in starts].count((2, 2)) == 2
    assert all(len(s["cluster"]) == s["workers"] for s in starts)
    assert result.stdout.count("DONE ") == 2


def test_min_workers_stops_with_every_slots_error_below_the_minimum(tmp_path):
    # Rank 1 fails whatever the size: slot 1 is dropped after 2 runs, then
    # slot 2 (now rank 1) fails twice and the job cannot go below 2 workers.
    result, starts = progress_job(tmp_path, "-n", "3", "--max-restarts", "1", "--min-workers", "2",
                                  FAIL_RANK="1")
    assert result.returncode == 4
    assert [s["workers"] for s in starts if s["run"] == 3] == [2, 2]
    assert not any(s["run"] > 3 for s in starts)
    assert ("rank 1 failed 2 runs in a row and the job cannot continue with fewer than 2 workers "
            "(--min-workers)") in result.stderr
    errors = result.stderr.split("the last error of every worker slot that failed:", 1)[1]
    assert "slot 1: rank 1 failed with exit code 4" in errors
    assert "slot error of rank 1 in a job of 3" in errors
    assert "slot 2: rank 1 failed with exit code 4" in errors
    assert "slot error of rank 1 in a job of 2" in errors


def test_a_preempted_worker_restarts_the_job_without_restarts_it_ends_it_with_75(tmp_path):
    # Rank 0 gets a preemption notice (SIGTERM to itself), saves and exits 75.
    result, starts = progress_job(tmp_path, "-n", "2", "--max-restarts", "1", "--preemption-grace", "2",
                                  CRASH="0:0:3:term", STEPS="40", STEP_S="0.02")
    assert result.returncode == 0, result.stderr
    lines = restart_lines(result)
    assert len(lines) == 1 and "rank 0 was preempted (exit code 75); resuming from step" in lines[0]
    saved = int(re.search(r"resuming from step (\d+) ", lines[0]).group(1))
    assert [s["step"] for s in starts if s["run"] == 1] == [saved, saved] and saved >= 3
    result, starts = progress_job(tmp_path, "-n", "2", "--preemption-grace", "2", ckpt_name="again",
                                  CRASH="0:0:3:term", STEPS="40", STEP_S="0.02")
    assert result.returncode == 75
    assert "rank 0 was preempted (exit code 75)" in result.stderr and not restart_lines(result)


@pytest.mark.parametrize("no_handler_rank,save_s,who", [
    ("", "0", "all 2"),
    ("1", "0", "1 of 2"),
    ("", "1.5", "all 2"),  # a save longer than --grace-period: --preemption-grace applies
])
def test_sigterm_to_the_launcher_ends_it_with_75_when_the_workers_saved(
        tmp_path, no_handler_rank, save_s, who):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    env = dict(os.environ, STEPS="100000", STEP_S="0.02", NO_HANDLER_RANK=no_handler_rank, SAVE_S=save_s)
    env.pop("TFX_RESTART_COUNT", None)
    proc = subprocess.Popen([sys.executable, RUN_PY, "-n", "2", "--max-restarts", "3",
                             "--grace-period", "0.3",
                             "--checkpoint-dir", str(ckpt), sys.executable, PROGRESS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        pids = [json.loads(proc.stdout.readline().split("START ", 1)[1])["pid"] for _ in range(2)]
        time.sleep(0.5)
        proc.send_signal(signal.SIGTERM)  # an engine's preemption notice: the workers save
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 75, err
    assert f"received SIGTERM; {who} worker(s) saved and exited 75 (preempted)" in err
    assert ": exiting 75 so that the job is restarted" in err
    assert "restarting" not in err and "START" not in out  # no run after the notice
    assert json.loads((ckpt / "LATEST.json").read_text())["step"] > 0
    for pid in pids:
        assert_dead(pid)
