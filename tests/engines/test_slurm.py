"""Slurm: srun with no TF_CONFIG (the cluster comes from SlurmClusterResolver), and a requeued job.

The tests start a real single-node Slurm (Debian's slurm-wlm: slurmctld and
slurmd on this machine, a throwaway configuration with auth/none, ports of
its own): 2 tasks of a Keras fit with ``srun -N1 -n2``, and a batch job of
tfx-dist-run that ``scontrol requeue`` preempts and Slurm runs again. They
skip with the reason where Slurm is missing or does not come up.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from fit_job import FIT, REPO_ROOT, check_two_ranks_one_host, fit_env, free_ports

CONF = """\
ClusterName=tfxtest
SlurmctldHost={host}(127.0.0.1)
AuthType=auth/none
CredType=cred/none
SlurmUser=root
SlurmdUser=root
SlurmctldPort={ctld_port}
SlurmdPort={d_port}
StateSaveLocation={dir}/state
SlurmdSpoolDir={dir}/spool
SlurmctldPidFile={dir}/slurmctld.pid
SlurmdPidFile={dir}/slurmd.pid
SlurmctldLogFile={dir}/slurmctld.log
SlurmdLogFile={dir}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
KillWait=20
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


@pytest.fixture
def slurm(tmp_path):
    missing = [t for t in ("slurmctld", "slurmd", "srun", "sinfo") if shutil.which(t) is None]
    if missing:
        pytest.skip(f"Slurm not installed ({', '.join(missing)} missing; scripts/setup.sh "
                    "installs Debian's slurm-wlm)")
    if os.geteuid() != 0:
        pytest.skip("a throwaway Slurm needs root here (slurmd runs jobs as their user)")
    d = tmp_path / "slurm"
    (d / "state").mkdir(parents=True)
    (d / "spool").mkdir()
    ctld_port, d_port = free_ports(2)
    conf = d / "slurm.conf"
    conf.write_text(CONF.format(host=socket.gethostname(), ctld_port=ctld_port, d_port=d_port,
                                dir=d, cpus=os.cpu_count() or 2))
    env = dict(os.environ, SLURM_CONF=str(conf))
    daemons = [subprocess.Popen([daemon, "-D", "-f", str(conf)], env=env, cwd=d,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
               for daemon in ("slurmctld", "slurmd")]
    try:
        deadline = time.monotonic() + 20
        state = ""
        while time.monotonic() < deadline:
            try:
                state = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True,
                                       text=True, timeout=10).stdout.strip()
            except subprocess.TimeoutExpired:
                state = "sinfo timed out"  # slurmctld still starting on a busy machine: ask again
            if state == "idle":
                break
            time.sleep(0.5)
        else:
            logs = "".join((d / f).read_text()[-1500:] for f in ("slurmctld.log", "slurmd.log")
                           if (d / f).exists())
            pytest.skip(f"the throwaway Slurm did not come up (node state {state!r}): {logs}")
        yield env
    finally:
        for p in daemons:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def test_srun_two_tasks_without_tf_config_fit_the_same_model(slurm, tmp_path):
    env = fit_env(slurm, TFX_JOB_SECRET="slurm-test-secret")
    proc = subprocess.run(["srun", "-N1", "-n2", "--export=ALL", sys.executable, FIT],
                          cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=150)
    check_two_ranks_one_host(proc)


def _wait_for(what, predicate, timeout, env, job_id):
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            state = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                                   text=True, timeout=20).stdout
            raise AssertionError(f"waited {timeout} s for {what}; the job: {state}")
        time.sleep(0.2)


def _job_field(env, job_id, field):
    text = subprocess.run(["scontrol", "show", "job", job_id], env=env, capture_output=True,
                          text=True, timeout=20).stdout
    return next((word.split("=", 1)[1] for word in text.split() if word.startswith(field + "=")), None)


def test_a_requeued_batch_job_resumes_with_the_restart_count(slurm, tmp_path):
    """scontrol requeue = what Slurm does on preemption (PreemptMode=REQUEUE) or a node failure:
    SIGTERM to the job's processes, then the job runs again with SLURM_RESTART_COUNT=1. The
    launcher passes the SIGTERM on, its workers save and exit 75, it exits 75; in the second run
    the workers see TFX_RESTART_COUNT=1 and resume from the saved step."""
    ckpt, out = tmp_path / "ckpt", tmp_path / "job.out"
    ckpt.mkdir()
    batch = tmp_path / "job.sbatch"
    batch.write_text(f"""#!/bin/bash
echo "BATCH SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-unset}}"
exec {sys.executable} -m tfx_dist.run -n 2 --grace-period 10 --checkpoint-dir {ckpt} \\
    {sys.executable} {os.path.join(REPO_ROOT, "tests", "engines", "progress_worker.py")}
""")
    env = dict(slurm, PYTHONPATH=REPO_ROOT, STEPS="60", STEP_S="0.1")
    env.pop("TFX_RESTART_COUNT", None)
    submitted = subprocess.run(["sbatch", "--parsable", "--requeue", "--open-mode=append",
                                f"--output={out}", f"--chdir={tmp_path}", "--export=ALL", str(batch)],
                               env=env, capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().split(";")[0]
    latest = ckpt / "LATEST.json"
    _wait_for("the first run's workers to save step 5",
              lambda: latest.exists() and json.loads(latest.read_text())["step"] >= 5, 60, env, job_id)
    requeue = subprocess.run(["scontrol", "requeue", job_id], env=env, capture_output=True, text=True,
                             timeout=30)
    assert requeue.returncode == 0, requeue.stderr
    # Slurm holds a requeued job back until its credentials expire (BeginTime = now + cred_expire):
    # start it now, as a free node would after that delay.
    _wait_for("the job to be pending again", lambda: _job_field(env, job_id, "JobState") == "PENDING",
              60, env, job_id)
    subprocess.run(["scontrol", "update", f"JobId={job_id}", "StartTime=now"], env=env,
                   capture_output=True, text=True, timeout=30)
    _wait_for("the second run to complete", lambda: _job_field(env, job_id, "JobState") == "COMPLETED",
              90, env, job_id)
    assert _job_field(env, job_id, "Restarts") == "1"
    text = out.read_text()
    first, second = text.split("BATCH SLURM_RESTART_COUNT=1", 1)
    assert "BATCH SLURM_RESTART_COUNT=unset" in first
    assert "received SIGTERM; all 2 worker(s) saved and exited 75 (preempted): exiting 75" in first, text
    starts = [json.loads(line.split("START ", 1)[1]) for line in text.splitlines() if "] START " in line]
    assert [(s["run"], s["step"]) for s in starts[:2]] == [(0, 0), (0, 0)], text
    saved = starts[2]["step"]
    assert saved >= 5 and [(s["run"], s["step"]) for s in starts[2:]] == [(1, saved)] * 2, text
    assert second.count("] DONE {\"step\": 60}") == 2, text
