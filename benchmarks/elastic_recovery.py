"""Elastic recovery: seconds from a kill -9 of one worker to the survivors' next completed step,
beside a cold start (the launcher's start to the first completed step of a fresh job).

Runs tests/elastic/tf_elastic_worker.py (a custom loop on tfx_dist.MultiWorkerMirroredStrategy)
under `tfx-dist-run --elastic --min-workers 2 --max-workers 3`, kills worker w1 at step 10, and
reads the STEP lines the workers print. The survivors' next step includes their reset (a new
generation's rendezvous, timed alone as reset_s) and the one retrace of the step function.
Prints one JSON line per trial and the machine's load average.

    python benchmarks/elastic_recovery.py --trials 3
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "elastic"))

import elastic_job  # noqa: E402


def cold_start_s() -> float:
    """From starting a 3-worker job to its first completed step (TensorFlow's start, the rendezvous,
    the first trace): what a restart of the job costs before it trains again."""
    env = dict(os.environ, PYTHONPATH=ROOT, ELASTIC_STEPS="1", ELASTIC_FULL_SIZE="1",
               TF_CPP_MIN_LOG_LEVEL="2")
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "tfx_dist.run", "-n", "3", "--", sys.executable,
                             "-c", _COLD], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, cwd=ROOT)
    first = None
    for line in proc.stdout:
        if first is None and " STEP " in f" {line}":
            first = time.monotonic() - started
    proc.wait()
    return first


# A non-elastic run of the same worker: TFX_ELASTIC_WORKER is only a name in its output.
_COLD = ("import os, runpy; os.environ['TFX_ELASTIC_WORKER'] = 'w'; "
         f"runpy.run_path({os.path.join(ROOT, 'tests', 'elastic', 'tf_elastic_worker.py')!r}, "
         "run_name='__main__')")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps({"load_average_before": os.getloadavg(), "cpus": os.cpu_count()}), flush=True)
    for trial in range(args.trials):
        code, done, _, output, recovery = elastic_job.run_killing_one(
            os.path.join(ROOT, "tests", "elastic", "tf_elastic_worker.py"), timeout=600,
            env={"ELASTIC_STEPS": "30"})
        errors = {name: d["error"] for name, d in done.items()}
        # The survivors' first reset (the one after the kill): close, the driver's answer, the rendezvous.
        resets = {name: round(d["resets"][0][6], 3) for name, d in done.items() if d["resets"]}
        print(json.dumps({"trial": trial, "exit": code, "kill_to_next_step_s": recovery,
                          "cold_start_to_first_step_s": cold_start_s(), "reset_s": resets,
                          "final_weight_error": errors,
                          "load_average": os.getloadavg()}), flush=True)
        if code != 0:
            print(output[-3000:], file=sys.stderr)


if __name__ == "__main__":
    main()
