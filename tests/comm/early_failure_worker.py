"""One rank of test_early_failure.py: rank 0 joins the rendezvous; rank 1
fails before its rendezvous finished, as SCENARIO says.

Usage: python early_failure_worker.py SCENARIO RANK ADDRESSES_JSON ARG

Rank 0 prints "CONNECTING <time>" before its rendezvous and "ERROR <json:
message, time>" (exit 3) when it fails. Rank 1 prints "FAILING <time>" just before it fails,
and "ARMED <bool>" where the scenario resolved the cluster: resolving has no side
effects, the early-failure hook is armed only by the Communicator (the strategy).
"""

import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from tfx_dist import cluster  # noqa: E402
from tfx_dist.comm import Communicator, RendezvousError, early_failure  # noqa: E402


def _tf_config(addresses, rank):
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": rank}})


def rank_0(addresses):
    print("CONNECTING", time.time(), flush=True)
    try:
        Communicator(0, len(addresses), addresses)
    except RendezvousError as e:
        print("ERROR", json.dumps({"message": str(e), "time": time.time()}), flush=True)
        sys.exit(3)
    print("CONNECTED", flush=True)


def rank_1(scenario, addresses):
    os.environ["TF_CONFIG"] = _tf_config(addresses, 1)
    if scenario == "script_raises":  # a bug after the cluster was resolved, before the strategy
        info = cluster.resolve()
        print("ARMED", early_failure.is_armed(), flush=True)  # resolve() arms nothing
        print("FAILING", time.time(), flush=True)
        raise FileNotFoundError(f"rank {info.rank}: no such file: /data/train-*.tfrecord")
    if scenario == "bad_setting":  # a setting only this rank has wrong
        os.environ["TFX_COMM_FUSION_BYTES"] = "-5"
        print("FAILING", time.time(), flush=True)
        Communicator(1, len(addresses), addresses)
    elif scenario == "killed":  # nobody can tell rank 0: it learns at TFX_TIMEOUT_S
        cluster.resolve()
        print("FAILING", time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    elif scenario == "caught":  # the script catches its error and exits on its own
        cluster.resolve()
        print("FAILING", time.time(), flush=True)
        sys.exit(2)


if __name__ == "__main__":
    scenario, rank, addresses = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    if rank == 0:
        rank_0(addresses)
    else:
        rank_1(scenario, addresses)
