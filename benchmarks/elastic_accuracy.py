"""Elastic training with a worker lost and one added, against an uninterrupted run: the accuracy at
the end, the steps lost per failure, the time from the kill to the survivors' next step.

Every job runs under `tfx-dist-run --elastic --min-workers 2 --max-workers 3`; in the killed runs
worker w1 gets SIGKILL mid-epoch, the two others go on with 2 workers and the launcher's
replacement joins at the end of the first epoch.

- `fit` and `loop`: tests/elastic/mwms_fit_worker.py on tfx_dist.MultiWorkerMirroredStrategy
  (`model.fit` in `tfx_dist.elastic.run`, or a custom loop), 960 examples of 4 classes, 3
  epochs, commit every --commit steps. The uninterrupted figure is rank 0's one-process replay of
  3 workers throughout from the same first weights (the replay of the steps the killed run
  committed matches its weights: `replay_error`), and, with --uninterrupted-jobs, a real job
  without a kill.
- `horovod-keras`: Horovod's `tensorflow2_keras_mnist_elastic.py` (examples/horovod/elastic/, only
  its import changed; 30 steps per epoch, 3 epochs as in its kill test), killed and not: the
  training accuracy of the last epoch that rank 0's progress bar prints.

Steps lost per failure: on the survivors, the last step completed before the kill minus the
step the job resumed from (the last commit). Prints one JSON line per run.

    python benchmarks/elastic_accuracy.py [--commit 5] [--uninterrupted-jobs]
"""

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "elastic"))

import elastic_job  # noqa: E402

WORKER = os.path.join(ROOT, "tests", "elastic", "mwms_fit_worker.py")
EXAMPLES = os.path.join(ROOT, "examples", "horovod", "elastic")
KERAS_EXAMPLE_CHANGES = [("steps_per_epoch=500 // hvd.size()", "steps_per_epoch=30 // hvd.size()"),
                         ("epochs=24-state.epoch", "epochs=3-state.epoch")]


def steps_lost(output: str, victim: str = "w1") -> dict:
    """Per survivor: its last step of generation 0 minus the step it resumed from."""
    steps = {}
    for line in output.splitlines():
        words = line.split()
        if len(words) >= 8 and words[1] == "STEP" and words[2] != victim:
            steps.setdefault(words[2], []).append((int(words[4]), int(words[7])))
    lost = {}
    for name, seen in steps.items():
        before = [s for g, s in seen if g == 0]
        after = [s for g, s in seen if g == 1]
        if before and after:
            lost[name] = max(before) - (min(after) - 1)
    return lost


def mwms_run(mode: str, commit: int, kill: bool) -> dict:
    env = {"ELASTIC_MODE": mode, "ELASTIC_COMMIT": str(commit), "ELASTIC_FAKE_NOTICE": "0"}
    started = time.monotonic()
    code, done, _, output, recovery = elastic_job.run_killing_one(
        WORKER, kill_at_step=13 if kill else 10 ** 9, timeout=900, env=env)
    w0 = done.get("w0", {})
    result = {"run": f"{mode}, {'w1 killed at step 13' if kill else 'uninterrupted job'}", "exit": code,
              "commit_every": commit, "accuracy": w0.get("accuracy"),
              "uninterrupted_replay_accuracy": w0.get("uninterrupted_accuracy"),
              "replay_error": w0.get("replay_error"), "resets": w0.get("resets"),
              "used_once_per_epoch": all(d["used_per_epoch"] == [[1.0, 1.0]] * 3 for d in done.values()),
              "wall_s": round(time.monotonic() - started, 1)}
    if kill:
        result.update({"kill_to_next_step_s": recovery, "steps_lost": steps_lost(output)})
    if code != 0:
        print(output[-3000:], file=sys.stderr)
    return result


def _pid_of(worker: str, parent: int):
    from test_horovod_elastic_examples_kill import _pid_of as find

    return find(worker, parent)


def horovod_keras_run(kill: bool, workdir: str) -> dict:
    with open(os.path.join(EXAMPLES, "tensorflow2_keras_mnist_elastic.py")) as f:
        text = f.read()
    for old, new in KERAS_EXAMPLE_CHANGES:
        text = text.replace(old, new)
    script = os.path.join(workdir, "tensorflow2_keras_mnist_elastic.py")
    with open(script, "w") as f:
        f.write(text)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, EXAMPLES]))
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tfx_dist.run", "--elastic", "--min-workers", "2",
                             "--max-workers", "3", sys.executable, script], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env, cwd=workdir)
    timer = threading.Timer(900, proc.kill)
    timer.start()
    lines, killed, accuracy = [], False, None
    try:
        for line in proc.stdout:
            lines.append(line)
            for part in line.split("\r"):
                part = part.strip()
                if kill and not killed and re.search(r"^\[w1\] Epoch 2/", part):
                    pid = _pid_of("w1", proc.pid)
                    if pid is not None:
                        os.kill(pid, signal.SIGKILL)
                        killed = True
                found = re.search(r"^\[w0\] .*accuracy: ([0-9.]+)", part)
                if found:
                    accuracy = float(found.group(1))  # the last one printed: the last epoch's
        proc.wait()
    finally:
        timer.cancel()
    if proc.returncode != 0:
        print("".join(lines)[-3000:], file=sys.stderr)
    return {"run": f"horovod-keras, {'w1 killed in epoch 2' if kill else 'uninterrupted job'}",
            "exit": proc.returncode, "killed": killed, "last_epoch_train_accuracy": accuracy,
            "wall_s": round(time.monotonic() - started, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", type=int, default=5)
    parser.add_argument("--runs", default="fit,loop,horovod-keras")
    parser.add_argument("--uninterrupted-jobs", action="store_true")
    args = parser.parse_args()
    import tempfile

    print(json.dumps({"load_average_before": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    for run in args.runs.split(","):
        kinds = (True, False) if run == "horovod-keras" or args.uninterrupted_jobs else (True,)
        for kill in kinds:
            if run == "horovod-keras":
                with tempfile.TemporaryDirectory() as workdir:
                    result = horovod_keras_run(kill, workdir)
            else:
                result = mwms_run(run, args.commit, kill)
            result["load_average"] = os.getloadavg()
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
