"""ctypes bindings of libtfx_comm's C API (custom_ops/comm/core/c_api.h)."""

from __future__ import annotations

import ctypes
import functools
import os

import numpy as np

from tfx_dist import _ops

DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p)
ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST = 1, 2, 3
REDUCTIONS = {"sum": 0, "mean": 1, "min": 2, "max": 3}
COMPRESSIONS = {"none": 0, "float16": 1, "bfloat16": 2}
ERR_LEN = 4096


class Options(ctypes.Structure):
    _fields_ = [("timeout_s", ctypes.c_double), ("bucket_bytes", ctypes.c_int64),
                ("cycle_time_ms", ctypes.c_double), ("use_shm", ctypes.c_int32),
                ("chunk_bytes", ctypes.c_int64)]


class Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op", ctypes.c_int32), ("dtype", ctypes.c_int32),
                ("reduction", ctypes.c_int32), ("compression", ctypes.c_int32),
                ("root", ctypes.c_int32), ("ndims", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("input", ctypes.c_void_p),
                ("output", ctypes.c_void_p), ("alloc", ALLOC_FN), ("alloc_arg", ctypes.c_void_p),
                ("done", DONE_FN), ("done_arg", ctypes.c_void_p)]


def _bfloat16():
    try:
        import ml_dtypes  # ships with TensorFlow

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


@functools.lru_cache(maxsize=None)
def dtype_codes() -> dict:
    codes = {np.dtype(np.float16): 1, np.dtype(np.float32): 3, np.dtype(np.float64): 4,
             np.dtype(np.int32): 5, np.dtype(np.int64): 6, np.dtype(np.uint8): 7}
    bf16 = _bfloat16()
    if bf16 is not None:
        codes[bf16] = 2
    return codes


def dtype_code(dtype) -> int:
    code = dtype_codes().get(np.dtype(dtype))
    if code is None:
        names = ", ".join(str(d) for d in dtype_codes())
        raise TypeError(f"tfx_dist collectives support {names}. Received: dtype={np.dtype(dtype)}")
    return code


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    path = _ops.library_path("libtfx_comm")
    if not os.path.exists(path):
        raise _ops.OpLibraryError(f"tfx_dist's collective runtime {path} is missing. {_ops._REBUILD}")
    so = ctypes.CDLL(path)
    so.tfx_comm_create.restype = ctypes.c_int64
    so.tfx_comm_create.argtypes = [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                   ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                   ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_int32]
    so.tfx_comm_destroy.argtypes = [ctypes.c_int64]
    so.tfx_comm_transport.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32]
    so.tfx_comm_run.restype = ctypes.c_int32
    so.tfx_comm_run.argtypes = [ctypes.c_int64, ctypes.POINTER(Entry), ctypes.c_int32,
                                ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                                ctypes.c_char_p, ctypes.c_int32]
    so.tfx_comm_free.argtypes = [ctypes.c_void_p]
    so.tfx_comm_stats.argtypes = [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]
    return so


def int_array(ctype, values):
    return (ctype * max(1, len(values)))(*values)
