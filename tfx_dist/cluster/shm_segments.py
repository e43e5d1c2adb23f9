"""Removes shared-memory segments whose creator died: a killed process would leave them in /dev/shm.

The C++ transport (``custom_ops/comm/core/transport/shm_pair.cc``) creates
``/dev/shm/tfx_comm_<pid>_<random>`` and unlinks it once the peer has mapped
it (or given up); a process killed between those two moments leaves it. No
unlink order closes that window (the peer needs the name to map it), so the
segments of dead creators are swept: by the launcher when a job ends, and by
every new communicator before it creates its own. A segment's mappings keep
working after the unlink, so removing the name of a dead creator's segment is
always safe. Standard library only: the launcher imports it.
"""

from __future__ import annotations

import os
import re

SHM_DIR = "/dev/shm"
_NAME = re.compile(r"^(?:tfx_comm_|tfx-probe-)(\d+)[_-][0-9a-f]+$")  # segments; rendezvous probes


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive, and not ours to judge
        return True
    return True


def sweep_dead_segments(shm_dir: str = SHM_DIR) -> list[str]:
    """Unlinks this user's ``tfx_comm_*`` segments (and rendezvous probes) whose creating
    process is gone; returns their names."""
    removed = []
    try:
        names = os.listdir(shm_dir)
    except OSError:  # no /dev/shm here: nothing to sweep
        return removed
    uid = os.getuid()
    for name in names:
        match = _NAME.match(name)
        if not match or _alive(int(match.group(1))):
            continue
        path = os.path.join(shm_dir, name)
        try:
            if os.stat(path).st_uid != uid:
                continue
            os.unlink(path)
            removed.append(name)
        except OSError:  # swept by someone else meanwhile
            pass
    return removed
