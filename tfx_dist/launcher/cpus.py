"""Which CPUs each worker is bound to (``--cpu-bind cores``): disjoint shares, whole cores first."""

from __future__ import annotations

import os
from typing import List, Optional, Sequence


def _siblings(cpu: int) -> frozenset:
    """The logical CPUs of ``cpu``'s physical core (itself alone if the kernel does not say)."""
    path = f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list"
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return frozenset({cpu})
    cpus = set()
    for part in text.split(","):
        first, _, last = part.partition("-")
        cpus.update(range(int(first), int(last or first) + 1))
    return frozenset(cpus)


def _split(items: list, n: int) -> List[list]:
    """``items`` cut into ``n`` contiguous runs whose lengths differ by at most one."""
    size, extra = divmod(len(items), n)
    runs, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        runs.append(items[start:end])
        start = end
    return runs


def cpu_shares(num_workers: int, cpus: Optional[Sequence[int]] = None,
               siblings=_siblings) -> Optional[List[List[int]]]:
    """One disjoint list of CPUs per worker, or None where binding would not help.

    ``cpus`` defaults to the CPUs this process may run on. Whole physical cores
    (all their hardware threads) go to one worker when there are at least as
    many cores as workers; else single logical CPUs when there are enough;
    else None: with more workers than CPUs, binding would only keep the
    scheduler from moving a worker to a CPU that another leaves idle. None also
    for one worker (nothing to share) and where the OS cannot bind.
    """
    if cpus is None:
        if not hasattr(os, "sched_getaffinity"):
            return None
        cpus = os.sched_getaffinity(0)
    cpus = sorted(cpus)
    if num_workers < 2 or len(cpus) < num_workers:
        return None
    allowed = set(cpus)
    cores = sorted({frozenset(siblings(c) & allowed) or frozenset({c}) for c in cpus}, key=min)
    if len(cores) >= num_workers:
        return [sorted(c for core in run for c in core) for run in _split(cores, num_workers)]
    return _split(cpus, num_workers)
