"""Horovod's ``DistributedOptimizer`` (Keras 3 optimizers) and ``DistributedGradientTape``."""

from __future__ import annotations

import tensorflow as tf

from tfx_dist import _tf_compat as tfc
from tfx_dist.horovod import basics, mpi_ops
from tfx_dist.horovod.compression import Compression


class _GradientReducer:
    """All-reduces a list of gradients (None kept) in one fused call, with Horovod's options."""

    def __init__(self, compression=Compression.none, sparse_as_dense=False, op=mpi_ops.Average,
                 gradient_predivide_factor=1.0, process_set=None, scale_local_gradients=True):
        if gradient_predivide_factor != 1.0 and op != mpi_ops.Average:
            raise ValueError("gradient_predivide_factor not supported with op != Average")
        mpi_ops._resolve_op(op, None)
        mpi_ops._check_process_set(process_set)
        self.compression, self.sparse_as_dense = compression, sparse_as_dense
        self.op, self.predivide = op, float(gradient_predivide_factor)
        self.scale_local_gradients = scale_local_gradients
        self.local_ids = set()  # id()s of the worker-local variables

    def register_local(self, variable):
        self.local_ids.add(id(variable))
        backing = getattr(variable, "_value", None)  # a keras.Variable's tf.Variable
        if backing is not None:
            self.local_ids.add(id(backing))

    def local_positions(self, variables):
        return [i for i, v in enumerate(variables) if id(v) in self.local_ids]

    def __call__(self, grads, local=()):
        """``local``: positions of worker-local variables' gradients, kept here (Horovod's
        ``register_local_var``), divided by size when ``scale_local_gradients``."""
        grads = list(grads)
        local = set(local)
        if local and self.scale_local_gradients and basics.size() > 1:
            for i in local:
                if grads[i] is not None:
                    grads[i] = _divided(grads[i], basics.size())
        present = [i for i, g in enumerate(grads) if g is not None and i not in local]
        if not present or basics.size() == 1:
            return grads
        values = [grads[i] for i in present]
        if self.sparse_as_dense:
            values = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g
                      for g in values]
        op, pre, post = self.op, 1.0, 1.0
        if op == mpi_ops.Average and self.predivide != 1.0:
            # Horovod's split of the averaging: divide by the factor before the
            # sum, multiply by factor / size after.
            op, pre, post = mpi_ops.Sum, 1.0 / self.predivide, self.predivide / basics.size()
        reduced = mpi_ops.grouped_allreduce(values, compression=self.compression, op=op,
                                            prescale_factor=pre, postscale_factor=post)
        for i, r in zip(present, reduced):
            grads[i] = r
        return grads


def _divided(grad, size):
    """``grad / size``, as Horovod divides the local gradients (IndexedSlices: their values)."""
    if isinstance(grad, tf.IndexedSlices):
        return tf.IndexedSlices(grad.values / size, grad.indices, grad.dense_shape)
    return grad / size


def _local_variables(local_layers):
    """The trainable variables of ``local_layers`` (a Keras layer or a list of them)."""
    import keras

    if local_layers is None:
        return []
    if isinstance(local_layers, keras.layers.Layer):
        local_layers = [local_layers]
    if not all(isinstance(layer, keras.layers.Layer) for layer in local_layers):
        raise ValueError(f"Expected local_layers to be Keras layers. Received: {local_layers!r}")
    return [v for layer in local_layers for v in layer.trainable_weights]


class _DistributedOptimizer(tfc.GradientHook):
    """Mixed in before a Keras 3 optimizer's class: gradients are all-reduced
    where Keras clips them (`tfc.optimizer_with_gradient_hook`), i.e. once per
    update, after the local accumulation of ``gradient_accumulation_steps``
    passes, before clipping, weight decay and the update."""

    _hvd_reducer: _GradientReducer
    _hvd_scale: float

    def register_local_var(self, var):
        """Keeps ``var``'s gradient on this worker: not all-reduced (Horovod's)."""
        self._hvd_reducer.register_local(var)

    def _backend_apply_gradients(self, grads, trainable_variables):
        # The hook's gradients are these variables', in order: note which are local
        # (plain ints, which Keras's attribute tracking leaves alone).
        self._hvd_local_positions = tuple(self._hvd_reducer.local_positions(trainable_variables))
        return super()._backend_apply_gradients(grads, trainable_variables)

    def _tfx_gradient_hook(self, grads):
        grads = self._hvd_reducer(grads, getattr(self, "_hvd_local_positions", ()))
        if self._hvd_scale != 1.0:
            grads = [g if g is None else mpi_ops._scale(g, self._hvd_scale) for g in grads]
        return grads


def DistributedOptimizer(optimizer, name=None, use_locking=False, device_dense="",
                         device_sparse="", compression=Compression.none, sparse_as_dense=False,
                         backward_passes_per_step=1, op=mpi_ops.Average,
                         gradient_predivide_factor=1.0, average_aggregated_gradients=False,
                         num_groups=0, groups=None, process_set=None, scale_local_gradients=True):
    """Wraps a Keras 3 optimizer so that it averages gradients over every rank before applying them.

    Returns a new optimizer of a subclass of ``optimizer``'s class, built from
    its config (as Horovod does). With ``backward_passes_per_step=N > 1`` the
    gradients of N passes are accumulated locally (Keras's
    ``gradient_accumulation_steps``) and all-reduced once per N passes; the
    update then uses their mean over the passes with
    ``average_aggregated_gradients=True``, their sum otherwise (Horovod's
    default).

    Example::

        opt = hvd.DistributedOptimizer(keras.optimizers.Adam(0.001 * hvd.size()))
        model.compile(optimizer=opt, loss=...)

    Raises:
      TypeError: ``optimizer`` is not a Keras 3 optimizer.
    """
    import keras

    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError("Expected `optimizer` to be a Keras 3 optimizer (keras.optimizers."
                        f"Optimizer). Received: optimizer={optimizer!r} (of type "
                        f"{type(optimizer).__name__})")
    if backward_passes_per_step < 1:
        raise ValueError(f"Expected backward_passes_per_step >= 1. "
                         f"Received: backward_passes_per_step={backward_passes_per_step}")
    config = optimizer.get_config()
    if backward_passes_per_step > 1:
        if config.get("gradient_accumulation_steps"):
            raise ValueError("Set either the optimizer's gradient_accumulation_steps or "
                             "backward_passes_per_step, not both.")
        config["gradient_accumulation_steps"] = backward_passes_per_step
    if name:
        config["name"] = name
    cls = tfc.optimizer_with_gradient_hook(
        type(optimizer.__class__.__name__, (_DistributedOptimizer, optimizer.__class__),
             {"__module__": optimizer.__class__.__module__}))
    distributed = cls.from_config(config)
    distributed._hvd_reducer = _GradientReducer(compression, sparse_as_dense, op,
                                                gradient_predivide_factor, process_set,
                                                scale_local_gradients)
    # Keras averages the accumulated passes; Horovod sums them unless told to average.
    distributed._hvd_scale = (float(backward_passes_per_step)
                              if backward_passes_per_step > 1 and not average_aggregated_gradients
                              else 1.0)
    return distributed


class _DistributedGradientTape(tf.GradientTape):
    """A `tf.GradientTape` whose ``gradient`` returns gradients all-reduced over every rank."""

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients=tf.UnconnectedGradients.NONE):
        grads = super().gradient(target, sources, output_gradients, unconnected_gradients)
        local = self._hvd_reducer.local_positions(tf.nest.flatten(sources, expand_composites=False))
        flat = self._hvd_reducer(tf.nest.flatten(grads, expand_composites=False), local)
        return tf.nest.pack_sequence_as(grads, flat)

    def register_local_source(self, source):
        """Keeps ``source``'s gradient on this worker: not all-reduced (Horovod's)."""
        self._hvd_reducer.register_local(source)


def DistributedGradientTape(gradtape, device_dense="", device_sparse="",
                            compression=Compression.none, sparse_as_dense=False,
                            op=mpi_ops.Average, gradient_predivide_factor=1.0, num_groups=0,
                            groups=None, process_set=None, scale_local_gradients=True):
    """Wraps a recorded `tf.GradientTape`: its ``gradient()`` all-reduces (Average) over every rank.

    Example::

        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
    """
    if not isinstance(gradtape, tf.GradientTape):
        raise TypeError(f"Expected `gradtape` to be a tf.GradientTape. Received: {gradtape!r}")
    tape = _DistributedGradientTape.__new__(_DistributedGradientTape)
    tape.__dict__.update(gradtape.__dict__)
    tape._hvd_reducer = _GradientReducer(compression, sparse_as_dense, op,
                                         gradient_predivide_factor, process_set, scale_local_gradients)
    return tape


def PartialDistributedGradientTape(gradtape, device_dense="", device_sparse="",
                                   compression=Compression.none, sparse_as_dense=False,
                                   op=mpi_ops.Average, gradient_predivide_factor=1.0, num_groups=0,
                                   groups=None, process_set=None, local_layers=None,
                                   scale_local_gradients=True):
    """`DistributedGradientTape` whose ``local_layers``' gradients stay on this worker
    (divided by size when ``scale_local_gradients``, as Horovod)."""
    tape = DistributedGradientTape(gradtape, compression=compression, sparse_as_dense=sparse_as_dense,
                                   op=op, gradient_predivide_factor=gradient_predivide_factor,
                                   process_set=process_set, scale_local_gradients=scale_local_gradients)
    for variable in _local_variables(local_layers):
        tape.register_local_source(variable)
    return tape


def PartialDistributedOptimizer(optimizer, name=None, device_dense="", device_sparse="",
                                compression=Compression.none, sparse_as_dense=False,
                                gradient_predivide_factor=1.0, op=mpi_ops.Average, groups=None,
                                process_set=None, local_layers=None, scale_local_gradients=True):
    """`DistributedOptimizer` whose ``local_layers``' gradients stay on this worker."""
    if op not in (mpi_ops.Average, mpi_ops.Sum):
        raise ValueError("op currently only supports Average and Sum")
    distributed = DistributedOptimizer(optimizer, name=name, compression=compression,
                                       sparse_as_dense=sparse_as_dense, op=op,
                                       gradient_predivide_factor=gradient_predivide_factor,
                                       process_set=process_set, scale_local_gradients=scale_local_gradients)
    for variable in _local_variables(local_layers):
        distributed.register_local_var(variable)
    return distributed
