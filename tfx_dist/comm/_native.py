"""ctypes bindings of libtfx_comm's C API (custom_ops/comm/core/c_api.h).

The codes and structs below copy that header; :func:`lib` checks every one
against the loaded library (``tfx_comm_abi_value``) and refuses a library
that disagrees, rather than sending it codes it reads differently.
"""

from __future__ import annotations

import ctypes
import functools

import numpy as np

from tfx_dist import _native as native
from tfx_dist import errors

DONE_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32, ctypes.c_char_p)
ALLOC_FN = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

# c_api.h's names, and their values here.
OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_ALLTOALL, OP_REDUCESCATTER, OP_JOIN = 1, 2, 3, 4, 5, 6
REDUCTIONS = {"sum": 0, "mean": 1, "min": 2, "max": 3}
COMPRESSIONS = {"none": 0, "float16": 1, "bfloat16": 2}
DTYPES = {"float16": 1, "bfloat16": 2, "float32": 3, "float64": 4, "int32": 5, "int64": 6, "uint8": 7}
HIERARCHICAL = {"off": 0, "on": 1, "auto": 2}
WIRE_PROTECTION = {"none": 0, "integrity": 1, "encrypt": 2}
# c_api.h's outcome codes (TFX_STATUS_<name>): TensorFlow's canonical numbers, as tfx_dist.errors.
STATUS = {name: getattr(errors, name) for name in (
    "OK", "CANCELLED", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "FAILED_PRECONDITION", "ABORTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED")}
ERR_LEN = native.ERR_LEN
error_buffer = native.error_buffer


def call(fn, *args, family: errors.ErrorFamily) -> None:
    """``tfx_dist._native.call`` of a libtfx_comm function: a failure raises ``family``'s error
    for its canonical code, or KeyboardInterrupt for a call Ctrl-C ended while it waited
    (the caller then takes ``interrupts.take_message()``, so that Python's handler need not raise)."""
    def error(code: int, message: str) -> BaseException:
        return KeyboardInterrupt(message) if code == errors.CANCELLED else family.error(code, message)

    native.call(fn, *args, raise_as=error)


def _abi_names() -> dict:
    """Every constant of c_api.h this module uses, by its C name."""
    names = {"TFX_OP_ALLREDUCE": OP_ALLREDUCE, "TFX_OP_ALLGATHER": OP_ALLGATHER,
             "TFX_OP_BROADCAST": OP_BROADCAST, "TFX_OP_ALLTOALL": OP_ALLTOALL,
             "TFX_OP_REDUCESCATTER": OP_REDUCESCATTER, "TFX_OP_JOIN": OP_JOIN,
             "sizeof(tfx_entry)": ctypes.sizeof(Entry), "sizeof(tfx_comm_options)": ctypes.sizeof(Options)}
    names.update({f"TFX_REDUCE_{k.upper()}": v for k, v in REDUCTIONS.items()})
    names.update({f"TFX_COMPRESSION_{k.upper()}": v for k, v in COMPRESSIONS.items()})
    names.update({f"TFX_DTYPE_{k.upper()}": v for k, v in DTYPES.items()})
    names.update({f"TFX_STATUS_{k}": v for k, v in STATUS.items()})
    names.update({f"TFX_HIERARCHICAL_{k.upper()}": v for k, v in HIERARCHICAL.items()})
    names.update({f"TFX_WIRE_{k.upper()}": v for k, v in WIRE_PROTECTION.items()})
    return names


def check_abi(so) -> None:
    """Raises OpLibraryError unless ``so`` has every code and struct size of this module."""
    ours = _abi_names()
    theirs = {name: so.tfx_comm_abi_value(name.encode()) for name in ours}
    native.check_abi(f"collective runtime {so._name}", "tfx_dist/comm/_native.py", ours, theirs)


class Options(ctypes.Structure):
    _fields_ = [("timeout_s", ctypes.c_double), ("bucket_bytes", ctypes.c_int64),
                ("cycle_time_ms", ctypes.c_double), ("use_shm", ctypes.c_int32),
                ("chunk_bytes", ctypes.c_int64), ("hierarchical", ctypes.c_int32),
                ("timeline_path", ctypes.c_char_p), ("timeline_mark_cycles", ctypes.c_int32),
                ("hierarchical_min_stripe_bytes", ctypes.c_int64),
                ("wire_protection", ctypes.c_int32), ("wire_keys", ctypes.c_char_p),
                ("alltoall_fusion", ctypes.c_int32), ("ctrl_wire_keys", ctypes.c_char_p)]


class Entry(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("op", ctypes.c_int32), ("dtype", ctypes.c_int32),
                ("reduction", ctypes.c_int32), ("compression", ctypes.c_int32),
                ("root", ctypes.c_int32), ("ndims", ctypes.c_int32),
                ("dims", ctypes.POINTER(ctypes.c_int64)), ("input", ctypes.c_void_p),
                ("output", ctypes.c_void_p), ("alloc", ALLOC_FN), ("alloc_arg", ctypes.c_void_p),
                ("done", DONE_FN), ("done_arg", ctypes.c_void_p), ("nsplits", ctypes.c_int32),
                ("splits", ctypes.POINTER(ctypes.c_int64)),
                ("received_splits", ctypes.POINTER(ctypes.c_int64)), ("mean_divisor", ctypes.c_int64)]


def _bfloat16():
    try:
        import ml_dtypes  # ships with TensorFlow

        return np.dtype(ml_dtypes.bfloat16)
    except ImportError:
        return None


@functools.lru_cache(maxsize=None)
def dtype_codes() -> dict:
    codes = {np.dtype(name): code for name, code in DTYPES.items() if name != "bfloat16"}
    bf16 = _bfloat16()
    if bf16 is not None:
        codes[bf16] = DTYPES["bfloat16"]
    return codes


def dtype_code(dtype) -> int:
    code = dtype_codes().get(np.dtype(dtype))
    if code is None:
        names = ", ".join(str(d) for d in dtype_codes())
        raise TypeError(f"tfx_dist collectives support {names}. Received: dtype={np.dtype(dtype)}")
    return code


_SIGNATURES = {
    "tfx_comm_abi_value": (ctypes.c_int64, [ctypes.c_char_p]),
    "tfx_comm_create": (ctypes.c_int64, [ctypes.c_int32, ctypes.c_int32, ctypes.POINTER(ctypes.c_int32),
                                         ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32),
                                         ctypes.POINTER(Options), ctypes.c_char_p, ctypes.c_int32]),
    "tfx_comm_destroy": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_comm_transport": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_int32, ctypes.c_char_p, ctypes.c_int32]),
    "tfx_comm_run": (ctypes.c_int32, [ctypes.c_int64, ctypes.POINTER(Entry), ctypes.c_int32,
                                      ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64),
                                      ctypes.c_char_p, ctypes.c_int32]),
    "tfx_comm_free": (None, [ctypes.c_void_p]),
    "tfx_comm_timeline": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int32, ctypes.c_char_p,
                                           ctypes.c_int32]),
    "tfx_comm_size": (ctypes.c_int32, [ctypes.c_int64]),
    "tfx_comm_set_call": (None, [ctypes.c_char_p]),
    "tfx_comm_allreduce_algorithm": (ctypes.c_int32, [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int32]),
    "tfx_comm_stats": (ctypes.c_int32, [ctypes.c_int64, ctypes.POINTER(ctypes.c_int64), ctypes.c_int32]),
    "tfx_comm_default_options": (Options, []),
    "tfx_comm_install_interrupt_hook": (ctypes.c_int32, []),
    "tfx_comm_take_interrupt_message": (ctypes.c_int32, [ctypes.c_char_p, ctypes.c_int32]),
}


@functools.lru_cache(maxsize=None)
def lib() -> ctypes.CDLL:
    so = native.load("libtfx_comm", "collective runtime", _SIGNATURES)
    check_abi(so)
    return so


def int_array(ctype, values):
    return (ctype * max(1, len(values)))(*values)
