"""Where each rank writes its timeline (``TFX_TIMELINE``, ``HOROVOD_TIMELINE``).

The runtime (custom_ops/comm/core/timeline.h) writes one Chrome trace per
rank; this module only names the files. ``%r`` in the path is replaced by the
rank; without it, rank 0 writes the path as given (as Horovod's timeline, which
only rank 0 writes) and rank r writes ``<stem>.rank<r><ext>``. A second
communicator of the same process (another strategy) adds ``.comm<n>``, so that
no file is written twice.
"""

from __future__ import annotations

import os
import threading

_lock = threading.Lock()
_used: set = set()


def rank_path(path: str, rank: int) -> str:
    """The file rank ``rank`` writes for the timeline setting ``path``.

    >>> rank_path("/tmp/t.json", 0), rank_path("/tmp/t.json", 1), rank_path("/tmp/t%r.json", 1)
    ('/tmp/t.json', '/tmp/t.rank1.json', '/tmp/t1.json')
    """
    if "%r" in path:
        return path.replace("%r", str(rank))
    if rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def claim(path: str, rank: int) -> str:
    """``rank_path``, made unique among the timelines this process has opened."""
    base = os.path.abspath(rank_path(path, rank))
    with _lock:
        candidate, n = base, 1
        while candidate in _used:
            n += 1
            stem, ext = os.path.splitext(base)
            candidate = f"{stem}.comm{n}{ext}"
        _used.add(candidate)
        return candidate
