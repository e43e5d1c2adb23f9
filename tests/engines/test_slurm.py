"""srun with no TF_CONFIG: the cluster comes from SLURM's environment (SlurmClusterResolver).

The test starts a real single-node Slurm (Debian's slurm-wlm: slurmctld and
slurmd on this machine, a throwaway configuration with auth/none, ports of
its own) and runs 2 tasks of a Keras fit with ``srun -N1 -n2``. It skips with
the reason where Slurm is missing or does not come up.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from fit_job import FIT, check_two_ranks_one_host, fit_env, free_ports

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
