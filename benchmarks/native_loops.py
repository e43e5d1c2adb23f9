"""Plain C loops (benchmarks/native/stream_loops.c) that show what the memory
system allows: reading K arrays once, and summing them in one pass with
streaming stores. Built on first use with the machine's C compiler into
build/bench/ (the op build already needs one).

    loops = NativeLoops.load()          # None where no C compiler is found
    loops.read_once(arrays, threads=2)
    loops.sum_stream(arrays, out, threads=2)
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "benchmarks", "native", "stream_loops.c")
LIBRARY = os.path.join(ROOT, "build", "bench", "libstream_loops.so")


class NativeLoops:
    def __init__(self, lib: ctypes.CDLL):
        self._lib = lib
        for fn in (lib.read_once, lib.sum_stream):
            fn.restype = ctypes.c_int
        lib.read_once.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int64, ctypes.c_int]
        lib.sum_stream.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                                   ctypes.c_int64, ctypes.c_int]

    @classmethod
    def load(cls) -> "NativeLoops | None":
        """The loops, compiled if the library is missing or older than its source."""
        compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
        if compiler is None:
            return None
        if not os.path.exists(LIBRARY) or os.path.getmtime(LIBRARY) < os.path.getmtime(SOURCE):
            os.makedirs(os.path.dirname(LIBRARY), exist_ok=True)
            subprocess.run([compiler, "-O3", "-march=native", "-shared", "-fPIC", "-pthread",
                            SOURCE, "-o", LIBRARY], check=True)
        return cls(ctypes.CDLL(LIBRARY))

    @staticmethod
    def _pointers(arrays) -> tuple[ctypes.Array, int]:
        n = arrays[0].size
        for a in arrays:
            if a.dtype.name != "float32" or a.size != n or not a.flags.c_contiguous:
                raise ValueError("expected contiguous float32 arrays of one size")
        return (ctypes.c_void_p * len(arrays))(*(a.ctypes.data for a in arrays)), n

    def read_once(self, arrays, threads: int) -> None:
        """Reads every element of every array once."""
        ptrs, n = self._pointers(arrays)
        if self._lib.read_once(ptrs, len(arrays), n, threads) != 0:
            raise ValueError(f"read_once: {len(arrays)} arrays on {threads} threads is out of range")

    def sum_stream(self, arrays, out, threads: int) -> None:
        """out = sum of the arrays, one pass, streaming stores."""
        ptrs, n = self._pointers(list(arrays) + [out])
        if self._lib.sum_stream(ptrs, len(arrays), ctypes.c_void_p(out.ctypes.data), n,
                                threads) != 0:
            raise ValueError(f"sum_stream: {len(arrays)} arrays on {threads} threads is out of range")
