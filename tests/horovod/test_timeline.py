"""The timeline (HOROVOD_TIMELINE / TFX_TIMELINE) on 2 real processes: valid
Chrome traces naming every tensor, with its phases in order."""

from __future__ import annotations

import json
import os

import workers

HERE = os.path.dirname(os.path.abspath(__file__))


def load_trace(path: str) -> list:
    with open(path) as f:
        events = json.load(f)  # the file must be complete JSON
    assert isinstance(events, list) and events, path
    return events


def phases(events: list, tensor: str) -> dict:
    """Span name -> the spans of ``tensor``'s first occurrence."""
    out = {}
    for e in events:
        if e.get("ph") == "X" and e["args"].get("tensor") == tensor and e["args"]["occurrence"] == 0:
            assert e["dur"] >= 0 and e["ts"] > 0, e
            out.setdefault(e["name"], []).append(e)
    return out


def check_in_order(events: list, tensor: str, op: str, rank: int) -> dict:
    spans = phases(events, tensor)
    negotiate, = spans[f"NEGOTIATE_{op}"]
    run, = spans[op]
    assert run["args"]["tensor"] == tensor
    # Negotiation ends where the run begins (one clock reading, rounded to us).
    assert negotiate["ts"] + negotiate["dur"] <= run["ts"] + 1, (negotiate, run)
    assert negotiate["pid"] == run["pid"] == rank
    if rank == 0:  # the coordinator also sees every rank's READY
        wait, = spans["WAIT_FOR_PEERS"]
        assert negotiate["ts"] <= wait["ts"] and wait["ts"] + wait["dur"] <= negotiate["ts"] + negotiate["dur"] + 1
    return run["args"]


def test_horovod_timeline_two_processes(tmp_path):
    path = str(tmp_path / "timeline.json")
    with open(os.path.join(HERE, "scripts", "timeline_worker.py")) as f:
        results = workers.run_workers(f.read(), 2, str(tmp_path), timeout_s=180,
                                      extra_env={"HOROVOD_TIMELINE": path})
    for r in results:
        assert r.result["sum_ok"] and r.result["gathered_rows"] == 3 and r.result["after"] == [2.0] * 4
    assert results[1].result["second"] == str(tmp_path / "second.rank1.json")
    for rank, file in enumerate([path, str(tmp_path / "timeline.rank1.json")]):
        events = load_trace(file)
        args = check_in_order(events, "grad_a/0", "ALLREDUCE", rank)
        assert args["bytes"] == 4000 and args["dtype"] == "float32" and args["shape"] == "[1000]"
        args = check_in_order(events, "gather_b", "ALLGATHER", rank)
        assert args["shape"] == f"[{rank + 1},3]"
        check_in_order(events, "bcast_c/0", "BROADCAST", rank)
        names = {e["args"].get("tensor") for e in events if e.get("ph") == "X"}
        assert any("in_function" in n for n in names), names  # inside tf.function too
        assert "after_start/0" not in names  # start_timeline closed this file
        rows = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
        assert "grad_a/0" in rows
        if rank == 0:
            ready = {e["args"]["rank"] for e in events if e["name"] == "READY"}
            assert ready == {0, 1}
        second = load_trace(results[rank].result["second"])
        check_in_order(second, "after_start/0", "ALLREDUCE", rank)
        assert "grad_a/0" not in {e["args"].get("tensor") for e in second if e.get("ph") == "X"}


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
