#!/bin/bash
# Runs an mpirun job again after a failure or a preemption, up to MAX_RESTARTS times
# without progress, resuming from TFX_CHECKPOINT_DIR: mpirun has no restarts of its
# own, so a loop around it is the engine. Each run gets TFX_RESTART_COUNT = 0, 1, ...
# The rule for "progress" is tfx-dist-run's (docs/clusters.md): the step in
# $TFX_CHECKPOINT_DIR/LATEST.json advanced since the run before.
#
#   TFX_CHECKPOINT_DIR=/shared/checkpoints/tfx-digits \
#       examples/mpi/run_with_restarts.sh -np 8 -H node1:4,node2:4 \
#       python3 examples/train_digits_multiworker.py
#
set -uo pipefail
: "${TFX_CHECKPOINT_DIR:?set TFX_CHECKPOINT_DIR to storage every host reads}"
MAX_RESTARTS=${MAX_RESTARTS:-3}
export TFX_CHECKPOINT_DIR

latest_step() {
    python3 -c 'import json, sys
try:
    print(json.load(open(sys.argv[1]))["step"])
except (OSError, ValueError, KeyError):
    print("none")' "$TFX_CHECKPOINT_DIR/LATEST.json"
}

restart=0
without_progress=0
step=$(latest_step)
while true; do
    export TFX_RESTART_COUNT=$restart
    # One job secret per run, passed to every rank (-x); mpirun's own channel is not used for it.
    TFX_JOB_SECRET=$(python3 -c 'import secrets; print(secrets.token_hex(32))')
    export TFX_JOB_SECRET
    mpirun -x TFX_RESTART_COUNT -x TFX_CHECKPOINT_DIR -x TFX_JOB_SECRET "$@"
    status=$?
    [ "$status" -eq 0 ] && exit 0
    previous=$step
    step=$(latest_step)
    if [ "$step" != "$previous" ]; then without_progress=0; fi
    if [ "$without_progress" -ge "$MAX_RESTARTS" ]; then
        echo "run_with_restarts: exit $status at checkpoint step $step, $without_progress restarts" \
             "without progress: stopping" >&2
        exit "$status"
    fi
    without_progress=$((without_progress + 1))
    restart=$((restart + 1))
    echo "run_with_restarts: mpirun exited $status; restart $restart from checkpoint step $step" >&2
done
