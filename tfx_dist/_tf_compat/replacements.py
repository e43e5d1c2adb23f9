"""The once-per-process installation of TensorFlow's and Keras's replaced functions.

Each module of this package that replaces functions at run time (`patches`
lists them) has an ``install`` of its own, and its public functions call
`install` here first: the first such call installs every replacement
(`patches` declares the list when imported, which the package does), so that
a replacement another one relies on (the checkpoint prefix, read during a save
by the tables a strategy created) is in place before it is needed.
"""

from __future__ import annotations

import threading
from typing import Callable, Sequence

from tfx_dist._tf_compat.versions import check_versions

_lock = threading.Lock()
_installers: tuple[Callable[[], None], ...] = ()
_installed = False


def declare(installers: Sequence[Callable[[], None]]) -> None:
    """Sets the functions `install` runs, in order (`patches` declares them all)."""
    global _installers
    _installers = tuple(installers)


def install() -> None:
    """Checks the TensorFlow version, then installs every replacement; once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        if not _installers:
            raise RuntimeError("tfx_dist._tf_compat.patches was not imported: nothing to install")
        check_versions()
        for installer in _installers:
            installer()
        _installed = True
