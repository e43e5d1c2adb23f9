"""The one ctypes loader of tfx_dist's native libraries (``tfx_dist/_ops/lib*.so``).

Every C API of tfx_dist reports an error the same way: it returns a
canonical code (``tfx_dist.errors``; 0 = OK) and writes the message into the
caller's buffer ``(char* err, int32_t err_len)``. The faces over one library
each (``comm/_native.py``, ``comm/service.py``, ``embedding/_native.py``,
``parameter_server/_native.py``) declare its signatures and ABI; this module
loads it, checks that ABI, and calls it with :func:`call`, which raises the
error of a failed call.
"""

from __future__ import annotations

import ctypes
import os
from typing import Callable

from tfx_dist import _ops, errors

ERR_LEN = 4096


def load(name: str, what: str, signatures: dict | None = None) -> ctypes.CDLL:
    """``_ops/<name>.so`` with ``signatures`` (``{function: (restype, argtypes)}``) declared.

    Raises:
      tfx_dist.OpLibraryError: the library is missing, cannot be loaded, or
        lacks one of the functions (``what`` names it: "collective runtime", ...).
    """
    path = _ops.library_path(name)
    if not os.path.exists(path):
        raise _ops.OpLibraryError(f"tfx_dist's {what} {path} is missing. {_ops._REBUILD}")
    try:
        so = ctypes.CDLL(path)
        declare(so, signatures or {})
    except (OSError, AttributeError) as e:  # AttributeError: a library from older sources
        raise _ops.OpLibraryError(f"Could not load tfx_dist's {what} {path}: {e}. {_ops._REBUILD}") from None
    return so


def declare(so: ctypes.CDLL, signatures: dict) -> None:
    """Sets ``restype`` and ``argtypes`` of each of ``signatures`` (``{function: (restype, argtypes)}``)."""
    for name, (restype, argtypes) in signatures.items():
        fn = getattr(so, name)
        fn.restype, fn.argtypes = restype, argtypes


def check_abi(library: str, binding: str, ours: dict, theirs: dict) -> None:
    """Raises OpLibraryError unless the library's ABI values (codes, struct sizes,
    versions; ``theirs``) are the binding's (``ours``), compared by name."""
    wrong = [f"{name}: library {theirs.get(name)}, Python {value}"
             for name, value in ours.items() if theirs.get(name) != value]
    if wrong:
        raise _ops.OpLibraryError(
            f"tfx_dist's {library} does not match {binding}: its codes or struct sizes differ "
            f"({'; '.join(wrong)}); it was built from other sources. {_ops._REBUILD}")


def abi_array(fn, names: list[str]) -> dict:
    """The values a C function ``fn(int64_t* out, int32_t n)`` writes, by ``names`` in order."""
    values = (ctypes.c_int64 * len(names))()
    fn(values, len(names))
    return dict(zip(names, values))


def error_buffer():
    """A buffer for a C API's error message (``err``, of ``ERR_LEN`` bytes)."""
    return ctypes.create_string_buffer(ERR_LEN)


def call(fn, *args, raise_as: Callable[[int, str], BaseException] = errors.error_from_code) -> None:
    """Calls ``fn(*args, err, ERR_LEN)``; a code other than 0 raises ``raise_as(code, message)``."""
    err = error_buffer()
    code = fn(*args, err, ERR_LEN)
    if code != 0:
        raise raise_as(code, err.value.decode("utf-8", "replace"))
