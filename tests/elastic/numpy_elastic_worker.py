"""A worker of an elastic job on numpy collectives (no TensorFlow), run by tfx-dist-run --elastic.

Each step all-reduces [1, step]: the sum must be [size, size * step] (every rank at the same
step, none counted twice). The state (the step) is committed every step and restored on a reset;
a joined rank receives it from rank 0. Prints "STEP <worker> <pid> <generation> <rank> <size>
<step>" lines and "DONE <worker> <pid> <json>" at the end.
"""

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import numpy as np  # noqa: E402

from tfx_dist import errors  # noqa: E402
from tfx_dist.elastic import membership  # noqa: E402

STEPS = int(os.environ.get("ELASTIC_STEPS", "150"))
STEP_S = float(os.environ.get("ELASTIC_STEP_S", "0.05"))
NAME = os.environ["TFX_ELASTIC_WORKER"]


def sync_state(step, generation):
    """Every rank gets rank 0's step when ranks joined (they hold none)."""
    if not generation.joined:
        return step
    (got,) = membership.communicator().broadcast_numpy([np.int64([step])], root=0, name="state")
    return int(got[0])


def main():
    if NAME in os.environ.get("ELASTIC_FAIL_AT_START", "").split(","):
        sys.exit(f"worker {NAME} fails at its start on purpose")
    membership.connect(0, 1, ["unused:0"], timeout_s=60)
    generation = membership.generation()
    committed = sync_state(0, generation)
    step, resets, wrong = committed, [], 0
    while step < STEPS:
        try:
            if membership.pending_change():
                raise errors.PeerLostError("workers were added or removed")
            comm = membership.communicator()
            (total,) = comm.allreduce_numpy([np.float64([1, step])], name="step")
            if total[0] != comm.size or total[1] != comm.size * step:
                wrong += 1
            step += 1
            committed = step
            print(f"STEP {NAME} {os.getpid()} {generation.number} {generation.rank} {generation.size} "
                  f"{step}", flush=True)
            time.sleep(STEP_S)
        except errors.PeerLostError as e:
            generation = membership.reset(attempts=5)
            step = sync_state(committed, generation)
            resets.append([generation.number, generation.rank, generation.size, list(generation.joined),
                           type(e).__name__])
    # The last step of every rank: leave together so that no collective is left unmatched.
    membership.communicator().allreduce_numpy([np.zeros(1)], name="end")
    print(f"DONE {NAME} {os.getpid()} " + json.dumps({"resets": resets, "wrong": wrong, "step": step}),
          flush=True)


if __name__ == "__main__":
    main()
