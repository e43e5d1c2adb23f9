"""Slurm: srun with no TF_CONFIG (the cluster comes from SlurmClusterResolver), and a requeued job.

The tests start a real single-node Slurm (Debian's slurm-wlm: slurmctld and
slurmd on this machine, a throwaway configuration with auth/none, ports of
its own): 2 tasks of a Keras fit with ``srun -N1 -n2``, and a batch job of
tfx-dist-run that ``scontrol requeue`` preempts and Slurm runs again. They
skip with the reason where Slurm is missing or does not come up.
"""

import json
import os
import re
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


WORKER = os.path.join(REPO_ROOT, "tests", "engines", "progress_worker.py")
# examples/slurm/one_node.sbatch's pattern: the batch step is tfx-dist-run.
LAUNCHER_JOB = """#!/bin/bash
echo "BATCH SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-unset}}"
exec {python} -m tfx_dist.run -n 2 --preemption-grace 10 --checkpoint-dir {ckpt} {python} {worker}
"""
# examples/slurm/train.sbatch's pattern: srun tasks, the script requeues the job when they exit 75.
SRUN_JOB = """#!/bin/bash
echo "BATCH SLURM_RESTART_COUNT=${{SLURM_RESTART_COUNT:-unset}}"
export TFX_RESTART_COUNT=${{SLURM_RESTART_COUNT:-0}} TFX_CHECKPOINT_DIR={ckpt}
status=0
srun --label --export=ALL {python} {worker} || status=$?
echo "SRUN EXIT $status"
if [ "$status" -eq 75 ]; then scontrol requeue "$SLURM_JOB_ID"; fi
exit "$status"
"""


def _submit(env, tmp_path, name, text, *options):
    ckpt, out, batch = tmp_path / name, tmp_path / f"{name}.out", tmp_path / f"{name}.sbatch"
    ckpt.mkdir()
    batch.write_text(text.format(python=sys.executable, ckpt=ckpt, worker=WORKER))
    submitted = subprocess.run(["sbatch", "--parsable", "--requeue", "--open-mode=append", *options,
                                f"--output={out}", f"--chdir={tmp_path}", "--export=ALL", str(batch)],
                               env=env, capture_output=True, text=True, timeout=30)
    assert submitted.returncode == 0, submitted.stderr
    return submitted.stdout.strip().split(";")[0], ckpt / "LATEST.json", out


def _check_resumed(out, steps):
    """The first run saved and exited 75; the second saw the restart count 1 and resumed there."""
    text = out.read_text()
    first, second = text.split("BATCH SLURM_RESTART_COUNT=1", 1)
    assert "BATCH SLURM_RESTART_COUNT=unset" in first, text
    starts = [json.loads(line.split("START ", 1)[1]) for line in text.splitlines() if "START {" in line]
    assert [(s["run"], s["step"]) for s in starts[:2]] == [(0, 0), (0, 0)], text
    saved = starts[2]["step"]
    assert saved >= 5 and [(s["run"], s["step"]) for s in starts[2:]] == [(1, saved)] * 2, text
    assert second.count(f"DONE {{\"step\": {steps}}}") == 2, text
    return first


def test_requeued_batch_jobs_resume_with_the_restart_count(slurm, tmp_path):
    """Two jobs at once. A (tfx-dist-run) gets `scontrol requeue`, what Slurm does on preemption
    (PreemptMode=REQUEUE) or a node failure: SIGTERM to the job's processes, then the job runs again
    with SLURM_RESTART_COUNT=1; the launcher passes the SIGTERM on, its workers save and exit 75, it
    exits 75, and gives the next run TFX_RESTART_COUNT=1. B (srun) gets SIGTERM in its tasks, as
    --signal=TERM@60 sends it before the time limit: they save and exit 75, the script requeues."""
    env = dict(slurm, PYTHONPATH=REPO_ROOT, STEPS="60", STEP_S="0.1")
    env.pop("TFX_RESTART_COUNT", None)
    launcher_job, launcher_latest, launcher_out = _submit(env, tmp_path, "launcher", LAUNCHER_JOB)
    srun_job, srun_latest, srun_out = _submit(env, tmp_path, "srun", SRUN_JOB, "--ntasks=2")
    for job, latest in ((launcher_job, launcher_latest), (srun_job, srun_latest)):
        _wait_for(f"job {job}'s first run to save step 5",
                  lambda: latest.exists() and json.loads(latest.read_text())["step"] >= 5, 60, env, job)
    for command in (["scontrol", "requeue", launcher_job], ["scancel", "--signal=TERM", srun_job]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    for job in (launcher_job, srun_job):
        # Slurm holds a requeued job back for a while (BeginTime): start it now, as it would then.
        _wait_for(f"job {job} to be pending again",
                  lambda: _job_field(env, job, "JobState") == "PENDING", 60, env, job)
        subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env,
                       capture_output=True, text=True, timeout=30)
    for job in (launcher_job, srun_job):
        _wait_for(f"job {job}'s second run to complete",
                  lambda: _job_field(env, job, "JobState") == "COMPLETED", 90, env, job)
        assert _job_field(env, job, "Restarts") == "1"
    first = _check_resumed(launcher_out, 60)
    # Slurm's SIGTERM and the launcher's may both reach a worker: the second can kill it as it exits.
    assert re.search(r"received SIGTERM; (all 2|1 of 2) worker\(s\) saved and exited 75 \(preempted\)"
                     r"( \(the others exited 0 or died of SIGTERM\))?: exiting 75", first), first
    first = _check_resumed(srun_out, 60)
    assert "SRUN EXIT 75" in first
