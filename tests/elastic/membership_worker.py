"""One rank of the membership test without a driver (numpy collectives: no TensorFlow).

Usage: python membership_worker.py SCENARIO RANK ADDRESSES_JSON
Prints "RESULT <json>".
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402

from tfx_dist import errors  # noqa: E402
from tfx_dist.comm import CollectiveError, Communicator, RendezvousError  # noqa: E402


def main():
    _, scenario, rank, addresses = sys.argv[:4]
    rank, addresses = int(rank), json.loads(addresses)
    from tfx_dist.elastic import membership

    comm = membership.connect(rank, len(addresses), addresses, timeout_s=20)
    out = {"before": float(comm.allreduce_numpy([np.float64([rank + 1])])[0][0])}
    if rank == 2:
        # A straggler of generation 0 (another process, another address) tries to join
        # generation 1 as rank 2: it is refused, and generation 1 forms regardless.
        straggler_at = json.loads(os.environ["STRAGGLER_ADDRESS"])
        try:
            Communicator(2, 3, addresses[:2] + straggler_at, timeout_s=4, generation=0, elastic=True)
            out["straggler"] = "joined"
        except RendezvousError as e:
            out["straggler"] = type(e).__name__
    generation = membership.reset()
    comm = membership.communicator()
    out["generation"] = [generation.number, generation.rank, generation.size, list(generation.joined)]
    out["old_closed"] = comm is not None
    out["after"] = float(comm.allreduce_numpy([np.float64([10 * (rank + 1)])])[0][0])
    if rank == 2:
        print("RESULT " + json.dumps(out), flush=True)
        os._exit(0)  # leaves without closing: its peers' next collective loses it
    try:
        comm.allreduce_numpy([np.ones(1000)], name="after-loss")
        out["lost"] = "no error"
    except errors.PeerLostError as e:
        out["lost"] = [type(e).__name__, isinstance(e, CollectiveError), membership.is_peer_lost(e)]
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
