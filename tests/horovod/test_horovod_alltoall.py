"""hvd.alltoall and hvd.reducescatter on 3 real processes, checked against numpy
(uneven and zero splits, uneven reduce-scatter blocks); the same job checks
HOROVOD_TIMELINE's files (the new collectives' spans) and hvd.start_timeline."""

from __future__ import annotations

import json
import os

import numpy as np
from timeline_check import check_in_order, load_trace, tensors

import workers

HERE = os.path.dirname(os.path.abspath(__file__))


def _same(got, expected) -> bool:
    if isinstance(got, str) or isinstance(expected, str):
        return got == expected
    got, expected = np.asarray(got, np.float64), np.asarray(expected, np.float64)
    return got.shape == expected.shape and bool(np.allclose(got, expected, rtol=1e-6))


def test_alltoall_and_reducescatter_on_three_processes(tmp_path):
    with open(os.path.join(HERE, "scripts", "alltoall_reducescatter.py")) as f:
        results = workers.run_workers(f.read(), 3, str(tmp_path), timeout_s=240,
                                      extra_env={"HOROVOD_TIMELINE": str(tmp_path / "hvd.json")})
    for rank, r in enumerate(results):
        checks = r.result["checks"]
        assert len(checks) == 9, sorted(checks)
        wrong = {name: pair for name, (got, expected) in checks.items()
                 for pair in [[got, expected]] if not all(map(_same, got, expected))}
        assert not wrong, f"rank {rank}: " + json.dumps(wrong)
        # The timeline: rank 0 writes hvd.json, rank r hvd.rank<r>.json.
        events = load_trace(str(tmp_path / ("hvd.json" if rank == 0 else f"hvd.rank{rank}.json")))
        names = tensors(events)
        uneven = next(n for n in names if n.startswith("a2a_uneven"))
        check_in_order(events, uneven, "ALLTOALL", rank)
        check_in_order(events, next(n for n in names if n.startswith("rs_sum")), "REDUCESCATTER", rank)
        assert not any("in_function" in n for n in names)  # start_timeline closed this file
        second = load_trace(r.result["second"])
        check_in_order(second, next(n for n in tensors(second) if "in_function" in n), "ALLREDUCE", rank)
