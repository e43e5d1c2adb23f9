"""Horovod's collectives (``hvd.allreduce``, ``hvd.allgather``, ...) on tfx_dist's runtime.

Each call is one `tfx_dist.comm.ops` kernel on the process's communicator, so
it works eagerly and inside `tf.function`. As in Horovod, the ranks match
calls by ``name``: calls given the same name on every rank meet whatever the
order they are issued in (within one traced function, or from several
threads); calls without a name get one from their position (see
`tfx_dist.comm.naming`), so every rank must then issue them in the same order.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tfx_dist.reduce.dtype_encoding import encode_for_move, encode_for_reduce
from tfx_dist.horovod import basics
from tfx_dist.horovod.compression import Compression

# Horovod's reduction ops, with Horovod's values.
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
_RUNTIME_REDUCTION = {Average: "mean", Sum: "sum", Min: "min", Max: "max"}
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


def _ops():
    from tfx_dist.comm import ops  # imported late: loads the op library

    return ops


def _check_process_set(process_set):
    if process_set is not None and getattr(process_set, "process_set_id", 0) != 0:
        raise NotImplementedError("tfx_dist.horovod has one process set, the global one; "
                                  f"Received: process_set={process_set!r}")


def _resolve_op(op, average):
    """Horovod's rule: ``op`` wins; the deprecated ``average`` picks Average or Sum; default Average."""
    if op is not None and average is not None:
        raise ValueError("The op parameter supersedes average. Please provide only one of them.")
    if op is None:
        op = Sum if average is False else Average
    if op == Adasum:
        raise NotImplementedError(
            "tfx_dist.horovod does not support op=hvd.Adasum (Adasum's scaled reduction is not "
            "in the tfx_dist runtime); use op=hvd.Average.")
    if op not in _OP_NAMES:
        raise ValueError(f"Expected op to be one of hvd.Average, hvd.Sum, hvd.Min, hvd.Max, "
                         f"hvd.Product. Received: op={op!r}")
    return op


def _scale(tensor, factor):
    if factor == 1.0:
        return tensor
    if isinstance(tensor, tf.IndexedSlices):
        return tf.IndexedSlices(_scale(tensor.values, factor), tensor.indices, tensor.dense_shape)
    if tensor.dtype in (tf.float16, tf.bfloat16):  # Horovod scales half precision in float32
        return tf.cast(tf.cast(tensor, tf.float32) * tf.constant(factor, tf.float32), tensor.dtype)
    if tensor.dtype.is_floating:
        return tensor * tf.cast(factor, tensor.dtype)
    return tf.cast(tf.cast(tensor, tf.float64) * factor, tensor.dtype)


def _with_gradient_times(tensor, factor):
    """``tensor`` unchanged, its gradient multiplied by ``factor``: Horovod's gradient
    definitions differ from the derivatives (tfx_dist.comm.ops) by a factor of size."""
    if factor == 1.0 or not tensor.dtype.is_floating:
        return tensor

    @tf.custom_gradient
    def identity(x):
        return tf.identity(x), lambda grad: grad * tf.cast(factor, grad.dtype)
    return identity(tensor)


def _sub(name, suffix):
    return f"{name}.{suffix}" if name else None


def grouped_allreduce(tensors, average=None, device_dense="", device_sparse="",
                      compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=None, name=None):
    """All-reduces a list of tensors in one negotiation (fused on the wire).

    Dense tensors are reduced by the runtime (``Average``, ``Sum``, ``Min``,
    ``Max``); ``Product`` is computed from an allgather of the inputs, since
    the runtime has no product reduction. ``tf.IndexedSlices`` are allgathered,
    as in Horovod.

    Returns:
      The reduced tensors, in the order and with the dtypes of ``tensors``.
    """
    _check_process_set(process_set)
    op = _resolve_op(op, average)
    comm = basics.communicator()
    results = [None] * len(tensors)
    dense = []
    for i, t in enumerate(tensors):
        if isinstance(t, tf.IndexedSlices):
            results[i] = _allreduce_sparse(t, op, prescale_factor, postscale_factor,
                                           _sub(name, f"sparse{i}"))
        elif op == Product:
            t = _scale(tf.convert_to_tensor(t), prescale_factor)
            gathered = _gather(tf.expand_dims(t, 0), _sub(name, f"product{i}"))
            results[i] = _scale(tf.reduce_prod(gathered, axis=0), postscale_factor)
        else:
            dense.append(i)
    if dense:
        sent, restore = [], []
        for i in dense:
            t = _scale(tf.convert_to_tensor(tensors[i]), prescale_factor)
            t, ctx = compression.compress(t)
            t, decode = encode_for_reduce(t)
            sent.append(t)
            restore.append((ctx, decode))
        reduced = _ops().all_reduce(sent, comm, reduction=_RUNTIME_REDUCTION[op], name=name)
        for i, r, (ctx, decode) in zip(dense, reduced, restore):
            results[i] = _scale(compression.decompress(decode(r), ctx), postscale_factor)
    return results


def allreduce(tensor, average=None, device_dense="", device_sparse="",
              compression=Compression.none, op=None, prescale_factor=1.0, postscale_factor=1.0,
              name=None, process_set=None, ignore_name_scope=False):
    """Reduces ``tensor`` over every rank (Horovod's ``hvd.allreduce``; default op Average).

    Example (2 ranks)::

        hvd.allreduce(tf.constant([1.0, 2.0]) * (hvd.rank() + 1), op=hvd.Sum)   # [3., 6.]

    ``tf.IndexedSlices`` are allgathered (values and indices), divided by the
    number of ranks for Average, as in Horovod.
    """
    return grouped_allreduce([tensor], average=average, compression=compression, op=op,
                             prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                             process_set=process_set, name=name)[0]


def _allreduce_sparse(slices, op, prescale_factor, postscale_factor, name):
    if op not in (Average, Sum):
        raise NotImplementedError("The allreduce of tf.IndexedSlices supports op=hvd.Average and "
                                  f"op=hvd.Sum only. Received: op=hvd.{_OP_NAMES[op]}")
    if prescale_factor != 1.0 or postscale_factor != 1.0:
        raise NotImplementedError("prescale_factor and postscale_factor are not supported with "
                                  "tf.IndexedSlices (as in Horovod); scale the values before the call.")
    values = _gather(slices.values, _sub(name, "values"))
    indices = _gather(slices.indices, _sub(name, "indices"))
    if op == Average:  # a true division, as Horovod's: integer values give exact floats
        values = tf.math.truediv(values, tf.cast(basics.size(), values.dtype))
    return tf.IndexedSlices(values, indices, dense_shape=slices.dense_shape)


def allgather(tensor, name=None, ignore_name_scope=False, process_set=None):
    """Concatenates every rank's ``tensor`` on dimension 0 (which may differ between ranks).

    A scalar is gathered as a vector of one element per rank.
    """
    _check_process_set(process_set)
    # Horovod's gradient: this rank's rows of the *average* of the output's gradient.
    return _gather(_with_gradient_times(tf.convert_to_tensor(tensor), 1.0 / basics.size()), name)


def grouped_allgather(tensors, name=None, ignore_name_scope=False, process_set=None):
    """`allgather` of each tensor of a list (each its own call, named ``<name>.<i>``)."""
    _check_process_set(process_set)
    return [allgather(t, name=_sub(name, str(i))) for i, t in enumerate(tensors)]


def _gather(tensor, name):
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        tensor = tf.reshape(tensor, [1])
    sent, decode = encode_for_move(tensor)
    return decode(_ops().all_gather(sent, basics.communicator(), name=name))


def broadcast(tensor, root_rank, name=None, ignore_name_scope=False, process_set=None):
    """Every rank receives rank ``root_rank``'s ``tensor`` (same shape and dtype everywhere)."""
    _check_process_set(process_set)
    # Horovod's gradient: the *average* of the outputs' gradients, on the root only.
    tensor = _with_gradient_times(tf.convert_to_tensor(tensor), 1.0 / basics.size())
    return _broadcast_many([tensor], root_rank, name)[0]


def _broadcast_many(tensors, root_rank, name):
    if not 0 <= root_rank < basics.size():
        raise ValueError(f"Expected 0 <= root_rank < size ({basics.size()}). "
                         f"Received: root_rank={root_rank}")
    sent, decoders = zip(*(encode_for_move(tf.convert_to_tensor(t)) for t in tensors))
    out = _ops().broadcast(list(sent), basics.communicator(), root=root_rank, name=name)
    return [decode(r) for r, decode in zip(out, decoders)]


def broadcast_variables(variables, root_rank, process_set=None, name=None):
    """Assigns rank ``root_rank``'s values to ``variables`` on every rank (one fused broadcast).

    Returns:
      In a `tf.function`, an op grouping the assignments; eagerly, None.
    """
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return None
    values = _broadcast_many([tf.convert_to_tensor(v) for v in variables], root_rank, name)
    assigns = [v.assign(value) for v, value in zip(variables, values)]
    return None if tf.executing_eagerly() else tf.group(*assigns)


def broadcast_(variables, root_rank, name=None, process_set=None):
    """In-place broadcast: assigns rank ``root_rank``'s values to ``variables`` on every rank.

    Returns:
      The variables' values after the assignment, as Horovod's ``broadcast_``.
    """
    _check_process_set(process_set)
    variables = list(variables)
    if not variables:
        return []
    values = _broadcast_many([tf.convert_to_tensor(v) for v in variables], root_rank, name)
    assigns = [v.assign(value) for v, value in zip(variables, values)]
    with tf.control_dependencies([a for a in assigns if not tf.executing_eagerly()]):
        return [v.read_value() for v in variables]


def alltoall(tensor, splits=None, name=None, ignore_name_scope=False, process_set=None):
    """Sends rows of ``tensor`` to each rank and receives what each rank sent this one.

    Rows ``[off_j, off_j + splits[j])`` of dimension 0 go to rank j; without
    ``splits``, dimension 0 is divided evenly (it must be a multiple of
    ``size()``). Example (2 ranks, rank r sends ``[10r, 10r+1, 10r+2]`` with
    ``splits=[1, 2]``): rank 0 receives ``[0, 10]``, rank 1 ``[1, 2, 11, 12]``.
    Differentiable: the gradient goes back by an all-to-all (Horovod's).

    Returns:
      As Horovod >= 0.22: with ``splits``, ``(output, received_splits)`` (what
      every rank sent this one, concatenated in rank order, and an int32
      vector of how many rows came from each rank); without, ``output``.

    Raises:
      tf.errors.InvalidArgumentError: no ``splits`` and dimension 0 not a
        multiple of ``size()``.
      ValueError: ``splits`` not a vector.
    """
    _check_process_set(process_set)
    tensor = tf.convert_to_tensor(tensor)
    if tensor.shape.rank == 0:
        raise ValueError(f"alltoall needs a tensor of rank >= 1. Received: {tensor!r}")
    n = basics.size()
    if splits is None:
        output, _ = _alltoall(tensor, _even_splits(tensor, n), name)
        return output
    splits = tf.convert_to_tensor(splits)
    if not splits.dtype.is_integer:
        raise TypeError(f"Expected integer splits. Received: splits.dtype={splits.dtype}")
    if splits.shape.rank not in (None, 1):
        raise ValueError(f"Expected splits to be a vector of one count per rank. Received: {splits!r}")
    if splits.dtype not in (tf.int32, tf.int64):
        splits = tf.cast(splits, tf.int64)
    return _alltoall(tensor, splits, name)


def _even_splits(tensor, n):
    message = f"alltoall without splits divides dimension 0 evenly over {n} ranks; pass splits="
    rows = tensor.shape[0]
    if rows is not None and rows % n:
        raise tf.errors.InvalidArgumentError(None, None, f"{message} (dimension 0 is {rows})")
    rows = tf.shape(tensor, out_type=tf.int64)[0]
    tf.debugging.assert_equal(rows % n, tf.constant(0, tf.int64), message=message)
    return tf.fill([n], rows // n)


def _alltoall(tensor, splits, name):
    sent, decode = encode_for_move(tensor)
    output, received = _ops().all_to_all(sent, splits, basics.communicator(), name=name)
    return decode(output), tf.cast(received, tf.int32)


def reducescatter(tensor, device_dense="", compression=Compression.none, op=Average, name=None,
                  process_set=None, prescale_factor=1.0, postscale_factor=1.0,
                  ignore_name_scope=False):
    """Reduces ``tensor`` over every rank and gives each rank its block of dimension 0.

    Rank r receives ``shape[0] // size() + (r < shape[0] % size())`` rows (the
    first ranks one more when dimension 0 does not divide evenly, as Horovod).
    Every rank passes the same shape and dtype. The gradient is Horovod's: the
    allgather of the output's gradient, times ``size()`` for ``Sum`` (times
    the scale factors): ``size()`` times the derivative, which
    `tfx_dist.comm.ops.reduce_scatter` gives.

    Args:
      op: ``Average`` (default) or ``Sum``, as Horovod's reducescatter.

    Returns:
      This rank's block of the reduction.
    """
    return grouped_reducescatter([tensor], compression=compression, op=op, process_set=process_set,
                                 prescale_factor=prescale_factor, postscale_factor=postscale_factor,
                                 name=name)[0]


def grouped_reducescatter(tensors, device_dense="", compression=Compression.none, op=Average,
                          process_set=None, prescale_factor=1.0, postscale_factor=1.0, name=None):
    """`reducescatter` of each tensor of a list (each its own call, named ``<name>.<i>``)."""
    _check_process_set(process_set)
    if op not in (Average, Sum):
        raise NotImplementedError(f"reducescatter supports op=Average or op=Sum, as Horovod. "
                                  f"Received: op={_OP_NAMES.get(op, op)}")
    results = []
    for i, tensor in enumerate(tensors):
        tensor = tf.convert_to_tensor(tensor)
        if tensor.shape.rank == 0:
            raise ValueError(f"reducescatter needs a tensor of rank >= 1. Received: {tensor!r}")
        t = _with_gradient_times(tensor, float(basics.size()))
        t = _scale(t, prescale_factor)
        t, ctx = compression.compress(t)
        t, decode = encode_for_reduce(t)
        out = _ops().reduce_scatter(t, basics.communicator(), reduction=_RUNTIME_REDUCTION[op],
                                    name=name if len(tensors) == 1 else _sub(name, str(i)))
        results.append(_scale(compression.decompress(decode(out), ctx), postscale_factor))
    return results


def join(device=-1):
    """Horovod's ``join``: waits until every rank has called it; returns the last rank to join.

    A rank that runs out of data calls ``join()``; until every rank has, it
    stands in for the all-reduces the other ranks still run, adding zeros
    (``Average`` still divides by ``size()``), so ranks with different numbers
    of batches train together (Horovod 0.28.1's semantics). An allgather,
    broadcast, alltoall or reducescatter while a rank has joined fails on the
    ranks that call it. Works eagerly and inside ``tf.function``.

    Returns:
      An int32 scalar tensor: the rank that called ``join`` last.
    """
    del device  # CPU only
    comm = basics.communicator()
    if tf.executing_eagerly():
        return tf.constant(comm.join("horovod.join"), tf.int32)
    # In a graph: a stateful Python op, run in program order with the collectives around it.
    last = tf.numpy_function(lambda: np.int32(comm.join("horovod.join")), [], tf.int32, stateful=True,
                             name="horovod_join")
    return tf.reshape(last, [])


def _executing_eagerly():
    """Horovod's helper, which its tests and some scripts call as ``hvd._executing_eagerly()``."""
    return tf.executing_eagerly()


def size_op(process_set_id=0, name=None):
    return tf.constant(basics.size(), tf.int32)


def rank_op(name=None):
    return tf.constant(basics.rank(), tf.int32)


def local_size_op(name=None):
    return tf.constant(basics.local_size(), tf.int32)


def local_rank_op(name=None):
    return tf.constant(basics.local_rank(), tf.int32)
