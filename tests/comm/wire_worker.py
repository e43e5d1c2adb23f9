"""One rank of the wire-protection test (test_wire_protection.py).

Usage: python wire_worker.py RANK ADDRESSES_JSON RELAY_PORT

Rank 1 reaches rank 0 through the test's relay (a TCP proxy on RELAY_PORT):
its connections to rank 0's address are redirected there, so the rendezvous
and the cluster stay as they are and every byte between the ranks crosses
the relay. Then both ranks all-reduce 4 MiB of float32 (a known sum) a few
times. Prints "RESULT <json>" (whether every sum was exact) or
"ERROR <message>" and the time it was raised.
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from relay_redirect import redirect_to_relay  # noqa: E402
from tfx_dist.comm import Communicator  # noqa: E402

N = 1 << 20  # float32 elements: 4 MiB, about 32 frames each way per all-reduce
REPS = 3


def main():
    rank, addresses, relay_port = int(sys.argv[1]), json.loads(sys.argv[2]), int(sys.argv[3])
    if rank == 1:
        redirect_to_relay(addresses[0], relay_port)
    try:
        comm = Communicator(rank, 2, addresses)
        wrong = 0
        for rep in range(REPS):
            mine = np.full(N, float(rank + 1 + rep), np.float32)
            out, = comm.allreduce_numpy([mine])
            wrong += int(np.sum(out != np.float32(1 + rep + 2 + rep)))
        print("RESULT", json.dumps({"exact": wrong == 0, "transport": comm.transport(1 - rank),
                                    "wrong_elements": wrong}), flush=True)
    except Exception as e:  # noqa: BLE001 - the test reads the message
        print("ERROR", json.dumps({"time": time.time(), "type": type(e).__name__, "message": str(e)}),
              flush=True)
        sys.exit(3)


if __name__ == "__main__":
    main()
