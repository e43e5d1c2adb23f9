"""A worker that pretends to train, for the launcher's and the engines' restart tests (no TensorFlow).

One step every STEP_S seconds; rank 0 saves the step in
TFX_CHECKPOINT_DIR/LATEST.json (atomically, as the checkpoint writer does)
after each step and on SIGTERM, then every rank exits 75 ("preempted"). The
ranks start together: each reads the checkpoint before rank 0 writes the next.
Prints ``START {...}`` (the run, the step it resumed from, its cluster) and
``DONE {...}``. Its rank comes from TF_CONFIG, or from srun's or mpirun's variables.

CRASH="RUN:RANK:STEPS:HOW,...": in run RUN (TFX_RESTART_COUNT, * for any),
rank RANK crashes STEPS steps after its start: HOW is an exit code, "kill"
(SIGKILL itself) or "term" (SIGTERM itself: a preemption notice).
FAIL_RANK / FAIL_FROM_WORKERS: that rank exits 4 at once while the job has at
least that many workers (a slot that keeps failing). SAVE_UNTIL: no saves
after that step. STEPS: where the job ends (default 8). NO_HANDLER_RANK: that
rank dies of SIGTERM (as a worker does that gets a second SIGTERM while exiting).
SAVE_S: how long the save after a notice takes.
"""
import json
import os
import signal
import sys
import time

if "TF_CONFIG" in os.environ:
    TF_CONFIG = json.loads(os.environ["TF_CONFIG"])
else:  # a task of srun, or a rank of mpirun
    slurm = "SLURM_PROCID" in os.environ
    TF_CONFIG = {"task": {"index": int(os.environ["SLURM_PROCID" if slurm else "OMPI_COMM_WORLD_RANK"])},
                 "cluster": {"worker": [None] * int(os.environ["SLURM_NTASKS" if slurm
                                                               else "OMPI_COMM_WORLD_SIZE"])}}
RANK = TF_CONFIG["task"]["index"]
N = len(TF_CONFIG["cluster"]["worker"])
RUN = int(os.environ["TFX_RESTART_COUNT"])
CKPT = os.environ["TFX_CHECKPOINT_DIR"]
env = os.environ.get


def save(step):
    if RANK == 0 and step <= int(env("SAVE_UNTIL", "1000000")):
        tmp = os.path.join(CKPT, "LATEST.json.tmp")
        with open(tmp, "w") as f:
            json.dump({"step": step, "num_workers": N}, f)
        os.replace(tmp, os.path.join(CKPT, "LATEST.json"))


try:
    with open(os.path.join(CKPT, "LATEST.json")) as f:
        step = start = json.load(f)["step"]
except FileNotFoundError:
    step = start = 0
notice = []
if str(RANK) != env("NO_HANDLER_RANK"):
    signal.signal(signal.SIGTERM, lambda *_: notice.append(1))
# All ranks read the checkpoint before rank 0 writes the next one.
open(os.path.join(CKPT, f"ready-{RUN}-{RANK}"), "w").close()
deadline = time.monotonic() + 30
while len([f for f in os.listdir(CKPT) if f.startswith(f"ready-{RUN}-")]) < N:
    if notice or time.monotonic() > deadline:
        sys.exit(75 if notice else 9)
    time.sleep(0.01)
print("START " + json.dumps({"workers": N, "run": RUN, "step": start, "pid": os.getpid(),
                             "cluster": TF_CONFIG["cluster"]["worker"]}), flush=True)
if str(RANK) == env("FAIL_RANK") and N >= int(env("FAIL_FROM_WORKERS", "1")):
    print(f"slot error of rank {RANK} in a job of {N}", file=sys.stderr)
    sys.exit(4)
while step < int(env("STEPS", "8")):
    if notice:
        time.sleep(float(env("SAVE_S", "0")))  # a save that takes time
        save(step)
        sys.exit(75)
    time.sleep(float(env("STEP_S", "0.05")))
    step += 1
    save(step)
    for spec in filter(None, env("CRASH", "").split(",")):
        run, rank, after, how = spec.split(":")
        if run in ("*", str(RUN)) and int(rank) == RANK and step - start == int(after):
            print(f"crashing at step {step}", file=sys.stderr, flush=True)
            if how in ("kill", "term"):  # "term": saved and exit 75 at the next step
                os.kill(os.getpid(), signal.SIGKILL if how == "kill" else signal.SIGTERM)
            else:
                sys.exit(int(how))
print("DONE " + json.dumps({"step": step}), flush=True)
