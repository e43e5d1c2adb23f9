"""One rank of the soak and stress runs (test_soak.py).

Usage: python soak_worker.py SCENARIO RANK ADDRESSES_JSON [ARG]

  soak STEPS: STEPS all-reduces of 500 float32 tensors (fused), every sum
      checked; samples resident memory and open fds along the way.
  big GIB: one all-reduce of a single GIB GiB float32 tensor, in place,
      checked element by element.
Prints "RESULT <json>".
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tfx_dist.comm import Communicator  # noqa: E402


def rss_kib() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def main():
    scenario, rank, addresses = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    arg = sys.argv[4] if len(sys.argv) > 4 else ""
    size = len(addresses)
    comm = Communicator(rank, size, addresses)
    result = {"transport": comm.transport(1 - rank) if size == 2 else "n/a"}
    t0 = time.monotonic()
    if scenario == "soak":
        steps = int(arg)
        tensors = [np.full(1 + i % 64, rank + 1, np.float32) for i in range(500)]
        want = size * (size + 1) / 2
        samples, wrong = [], 0
        for step in range(steps):
            outs = comm.allreduce_numpy(tensors, name="soak")
            if step % 50 == 0:
                wrong += sum(int(np.sum(o != want)) for o in outs)
            if step % max(1, steps // 20) == 0 or step == steps - 1:
                samples.append({"step": step, "rss_kib": rss_kib(), "fds": len(os.listdir("/proc/self/fd"))})
        result.update(samples=samples, wrong=wrong)
    elif scenario == "big":
        n = (int(arg) << 30) // 4
        x = np.full(n, rank + 1, np.float32)
        comm.allreduce_numpy([x], out=[x], name="big")
        want = np.float32(size * (size + 1) / 2)
        wrong = 0
        for i in range(0, n, 1 << 26):  # checked in slices: no second 2 GiB array
            wrong += int(np.count_nonzero(x[i:i + (1 << 26)] != want))
        result.update(wrong=wrong, elements=n)
    result["seconds"] = time.monotonic() - t0
    comm.close()
    print("RESULT", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
