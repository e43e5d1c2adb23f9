"""Same host? The shared-memory probe a client names in its HELLO.

Shared memory works between two processes exactly when they see
the same ``/dev/shm`` (the C++ ``ShmPair`` maps a POSIX segment created with
mode 0600 there). So rather than compare host names (equal in containers,
and in the tests' simulated hosts) or any identity, the client *probes*: it
creates a fresh segment with a random 128-bit name in its ``/dev/shm``, names
it in HELLO, and the server reports whether it can open it and read the
nonce it holds. That answer is true on one machine (one mount and IPC
namespace, same user), false across machines, containers with private
``/dev/shm``, or users, whatever the host names; and it is the very operation
the shared-memory transport needs. The answer is bound into the MACs.
"""

from __future__ import annotations

import os
import re
import secrets

_SHM_DIR = "/dev/shm"
_PROBE_NAME = re.compile(r"^tfx-probe-[0-9]+-[0-9a-f]{32}$")


class _ShmProbe:
    """A fresh segment in this process's /dev/shm (see above); removed by close()."""

    def __init__(self):
        self.name = f"tfx-probe-{os.getpid()}-{secrets.token_hex(16)}"  # pid: swept if we die
        self.path = os.path.join(_SHM_DIR, self.name)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except OSError:  # no /dev/shm here: no shared memory either
            self.name = ""
            return
        with os.fdopen(fd, "wb") as f:
            f.write(self.name.encode())

    def close(self) -> None:
        if self.name:
            try:
                os.unlink(self.path)
            except OSError:
                pass


def _can_open_probe(name: object) -> bool:
    """True if the client's probe segment is visible here (the name is checked: no paths)."""
    if not isinstance(name, str) or not _PROBE_NAME.match(name):
        return False
    try:
        with open(os.path.join(_SHM_DIR, name), "rb") as f:
            return f.read(64) == name.encode()
    except OSError:
        return False
