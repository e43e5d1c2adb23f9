"""The timeline (TFX_TIMELINE) on 2 real processes: valid Chrome traces naming
every tensor, with its phases in order. HOROVOD_TIMELINE and hvd.start_timeline
are checked in test_horovod_alltoall.py (its job imports TensorFlow anyway)."""

from __future__ import annotations

from timeline_check import check_in_order, load_trace, tensors

import workers

SCRIPT = """
import json, os
import numpy as np
import workers
from tfx_dist.comm import Communicator

config = json.loads(os.environ["TF_CONFIG"])
rank = config["task"]["index"]
comm = Communicator(rank, 2, config["cluster"]["worker"])
total, = comm.allreduce_numpy([np.arange(1000, dtype=np.float32)], name="grad_a")
gathered = comm.allgather_numpy(np.ones((rank + 1, 3), np.float32), name="gather_b")
comm.broadcast_numpy([np.array([7, 8], np.int64)], root=0, name="bcast_c")
first = comm.timeline_path
second = comm.start_timeline(os.path.join(os.environ["WORKDIR"], "second.json"))
after, = comm.allreduce_numpy([np.ones(4, np.float32)], name="after_start")
comm.stop_timeline()
workers.report({"sum_ok": bool(np.allclose(total, np.arange(1000) * 2)),
                "gathered_rows": int(gathered.shape[0]), "after": after.tolist(),
                "first": first, "second": second})
comm.close()
"""


def test_timeline_two_processes(tmp_path):
    path = str(tmp_path / "timeline.json")
    results = workers.run_workers(SCRIPT, 2, str(tmp_path), timeout_s=120,
                                  extra_env={"TFX_TIMELINE": path})
    for rank, r in enumerate(results):
        assert r.result["sum_ok"] and r.result["gathered_rows"] == 3 and r.result["after"] == [2.0] * 4
        suffix = "" if rank == 0 else f".rank{rank}"
        assert r.result["first"] == str(tmp_path / f"timeline{suffix}.json")
        assert r.result["second"] == str(tmp_path / f"second{suffix}.json")
        events = load_trace(r.result["first"])
        args = check_in_order(events, "grad_a/0", "ALLREDUCE", rank)
        assert args["bytes"] == 4000 and args["dtype"] == "float32" and args["shape"] == "[1000]"
        args = check_in_order(events, "gather_b", "ALLGATHER", rank)
        assert args["shape"] == f"[{rank + 1},3]"
        check_in_order(events, "bcast_c/0", "BROADCAST", rank)
        assert "after_start/0" not in tensors(events)  # start_timeline closed this file
        rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        assert {"grad_a/0", "gather_b", "bcast_c/0"} <= rows
        if rank == 0:
            assert {e["args"]["rank"] for e in events if e["name"] == "READY"} == {0, 1}
        second = load_trace(r.result["second"])
        check_in_order(second, "after_start/0", "ALLREDUCE", rank)
        assert "grad_a/0" not in tensors(second)


COMM_SCRIPT = """
import json, os
import numpy as np
import workers
from tfx_dist.comm import Communicator

config = json.loads(os.environ["TF_CONFIG"])
comm = Communicator(config["task"]["index"], 2, config["cluster"]["worker"])
out, = comm.allreduce_numpy([np.ones(8, np.float32)], name="plain")
workers.report({"out": out.tolist(), "file": comm.timeline_path})
"""  # exits without close(): the file must still be complete


def test_tfx_timeline_with_rank_placeholder(tmp_path):
    results = workers.run_workers(COMM_SCRIPT, 2, str(tmp_path), timeout_s=120,
                                  extra_env={"TFX_TIMELINE": str(tmp_path / "comm_%r.json"),
                                             "TFX_TIMELINE_MARK_CYCLES": "1"})
    for rank, r in enumerate(results):
        assert r.result["out"] == [2.0] * 8
        assert r.result["file"] == str(tmp_path / f"comm_{rank}.json")
        events = load_trace(r.result["file"])
        check_in_order(events, "plain/0", "ALLREDUCE", rank)
        assert any(e["name"] == "CYCLE" for e in events)
