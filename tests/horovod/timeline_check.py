"""Reading and checking timeline files (the Chrome traces of TFX_TIMELINE / HOROVOD_TIMELINE)."""

from __future__ import annotations

import json


def load_trace(path: str) -> list:
    with open(path) as f:
        events = json.load(f)  # the file must be complete JSON
    assert isinstance(events, list) and events, path
    return events


def spans(events: list, tensor: str, occurrence: int = 0) -> dict:
    """Span name -> the spans of one occurrence of ``tensor``."""
    out = {}
    for e in events:
        if e.get("ph") == "X" and e["args"].get("tensor") == tensor and e["args"]["occurrence"] == occurrence:
            assert e["dur"] >= 0 and e["ts"] > 0, e
            out.setdefault(e["name"], []).append(e)
    return out


def check_in_order(events: list, tensor: str, op: str, rank: int) -> dict:
    """Asserts ``tensor``'s phases are there and in order; returns its run's args."""
    found = spans(events, tensor)
    assert f"NEGOTIATE_{op}" in found and op in found, (tensor, sorted(found))
    negotiate, = found[f"NEGOTIATE_{op}"]
    run, = found[op]
    assert run["args"]["tensor"] == tensor
    # Negotiation ends where the run begins (one clock reading, rounded to us).
    assert negotiate["ts"] + negotiate["dur"] <= run["ts"] + 1, (negotiate, run)
    assert negotiate["pid"] == run["pid"] == rank
    if rank == 0:  # the coordinator also sees every rank's READY
        wait, = found["WAIT_FOR_PEERS"]
        assert negotiate["ts"] <= wait["ts"]
        assert wait["ts"] + wait["dur"] <= negotiate["ts"] + negotiate["dur"] + 1
    return run["args"]


def tensors(events: list) -> set:
    return {e["args"]["tensor"] for e in events if e.get("ph") == "X"}
