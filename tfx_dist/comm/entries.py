"""The C entries (``tfx_entry``) of a collective over numpy arrays, and its outputs."""

from __future__ import annotations

import ctypes

import numpy as np

from tfx_dist.comm import _native


def entry(name, op, array, out, reduction=0, compression=0, root=0, keep=None, splits=None,
          received_splits=None) -> _native.Entry:
    """The entry of one tensor; the C arrays it points to are appended to ``keep``
    (the caller holds them until the collective finished)."""
    dims = _native.int_array(ctypes.c_int64, array.shape)
    keep.append(dims)
    result = _native.Entry(
        name=name.encode(), op=op, dtype=_native.dtype_code(array.dtype), reduction=reduction,
        compression=compression, root=root, ndims=array.ndim, dims=dims,
        input=array.ctypes.data, output=out.ctypes.data if out is not None else None,
        alloc=_native.ALLOC_FN(), alloc_arg=None, done=_native.DONE_FN(), done_arg=None)
    if splits is not None:
        c_splits = _native.int_array(ctypes.c_int64, splits)
        keep.append(c_splits)
        result.nsplits = len(splits)
        result.splits = c_splits
        result.received_splits = received_splits.ctypes.data_as(ctypes.POINTER(ctypes.c_int64))
    return result


def take(ptr, dim0: int, like: np.ndarray) -> np.ndarray:
    """The runtime-allocated output of `dim0` rows like `like`'s, freed after copying."""
    out = np.empty((dim0,) + like.shape[1:], like.dtype)
    if out.nbytes:
        ctypes.memmove(out.ctypes.data, ptr, out.nbytes)
    _native.lib().tfx_comm_free(ptr)
    return out


def allreduce_outputs(ins: list[np.ndarray], out) -> list[np.ndarray]:
    """Where an all-reduce of ``ins`` writes: new arrays, or the caller's ``out`` once checked."""
    if out is None:
        return [np.empty_like(a) for a in ins]
    outs = list(out)
    for a, o in zip(ins, outs, strict=True):
        if o.shape != a.shape or o.dtype != a.dtype or not o.flags.c_contiguous \
                or not o.flags.writeable:
            raise ValueError(f"Expected `out` arrays like the inputs (C-contiguous, "
                             f"writeable). Received: {o.dtype}{list(o.shape)} for "
                             f"{a.dtype}{list(a.shape)}")
    # The runtime reduces large tensors where they lie: a result must
    # not land on another tensor's input or result.
    for i, o in enumerate(outs):
        for j in range(len(ins)):
            if j != i and (np.may_share_memory(o, ins[j]) or
                           (j < i and np.may_share_memory(o, outs[j]))):
                raise ValueError(f"`out[{i}]` overlaps the input or output of tensor "
                                 f"{j}; each result needs memory of its own (or its "
                                 "own input's, to reduce in place).")
    return outs
