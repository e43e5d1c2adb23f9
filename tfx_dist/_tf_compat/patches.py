"""The functions of TensorFlow and Keras that tfx_dist replaces at run time, installed once.

Each replacement keeps TensorFlow's behaviour for every object tfx_dist did not
mark, and is installed (with the others) by the first call that needs one:

1. Direct input (`read_one_element_per_replica`): the per-worker iterator's
   ``get_next_as_list`` and ``get_next_as_optional_list``
   (``input_lib._SingleWorkerDatasetIteratorBase``) read one element per local
   replica, in order, for iterators with `DirectReadOptions`. TensorFlow's
   direct path reads one element per call: it only ever has one replica there.
2. Local partial-batch check (`check_partial_batches_locally`):
   ``input_lib.DistributedIterator.get_next_as_optional`` ignores the flag
   that `fields.skip_partial_batch_check` sets and always all-reduces "this
   worker still has data" across workers (through
   ``input_lib._calculate_replicas_with_values``); for the registered strategy
   classes it counts this worker's replicas only, which then agree with every
   other worker's.
3. Iterator hand-over (`hand_over_dropped_iterators`):
   ``input_lib.DistributedDataset.__iter__`` and
   ``DistributedDatasetsFromFunction.__iter__`` give the tf.data iterators of a
   marked dataset's eager iterator, once that is garbage, to a callback (which
   destroys them off the training path).
4. Table gradients (`route_table_gradients`): Keras's
   ``TFOptimizer._backend_update_step`` (all-reduce every gradient, then apply
   the update rule to every variable) first lets a strategy whose extended
   has ``push_table_gradients`` take the gradients of the tables it holds
   (parameter servers apply their rule where the rows live).
5. Checkpoint prefix (`current_checkpoint_prefix`, `current_restore_prefix`):
   ``TrackableSaver.save`` and ``TrackableSaver.restore``
   (``tensorflow/python/checkpoint/checkpoint.py``, the one path of
   `tf.train.Checkpoint`'s write/save/read/restore and
   `tf.train.CheckpointManager.save`) record the prefix they write or read
   for the duration of the call, so that an object serialized into the
   checkpoint (a parameter-server table, whose servers write their own
   files) can put its files beside it and find them there again, wherever
   the checkpoint was copied. And ``checkpoint_management._delete_file_if_exists``
   (how `tf.train.CheckpointManager` deletes the checkpoints beyond
   ``max_to_keep``, and `tf.train.remove_checkpoint`), when it deletes a
   checkpoint's ``.index``, also deletes the files registered with
   `delete_with_checkpoints` beside it (the tables' shard files).
6. Keras's model build from the first batch (`build_from_first_replica`):
   ``TensorFlowTrainer._maybe_symbolic_build`` averages the first batch's
   per-replica values element-wise (``strategy.reduce("MEAN", batch,
   axis=None)``) only to learn shapes and dtypes, which fails when a global
   batch splits unevenly (3/3/3/1 rows). For the registered strategy classes
   it builds from the first replica's values instead: the same shapes when the
   split is even, and the largest slice when not (TensorFlow deals the extra
   rows to the first replicas).
7. Loss scaling by the replica's share (`replica_loss_share`): Keras's
   ``scale_loss_for_distribution`` (``keras.src.losses.loss``) multiplies a
   replica's mean loss by ``1 / num_replicas_in_sync`` and
   ``unscale_loss_for_distribution`` undoes it. Inside a `replica_loss_share`
   block they multiply and divide by that share instead (this replica's rows
   over the global batch's), so the summed gradients are the single-device
   gradient of the global batch, even when the replicas hold different
   numbers of rows; outside one, Keras's own functions run.
8. Optimizer state kept elsewhere (`keep_optimizer_extras`): Keras's
   ``BaseOptimizer.save_own_variables`` / ``load_own_variables`` (the
   optimizer's entry of a ``.weights.h5`` / ``.keras`` file) also let a
   strategy whose extended has ``save_optimizer_extras`` add entries (the
   servers' slots of dense variables) and ``load_optimizer_extras`` read them;
   Keras's own load sees its entries only (it skips a count that differs).
9. Eager iterators of tf.data datasets (`hand_over_dataset_iterators`):
   ``tf.data.Dataset.__iter__`` (``iter(dataset)``, ``for x in dataset``, and
   the iterators Keras's ``fit``, ``evaluate`` and ``predict`` make from a
   dataset no strategy distributed), once a callback is set, gives each eager
   iterator's resource, once the iterator is garbage, to that callback.
"""

from __future__ import annotations

import threading
import types
import weakref

import tensorflow as tf

from tfx_dist._tf_compat import fields
from tfx_dist._tf_compat.imports import input_lib
from tfx_dist._tf_compat.versions import check_versions

_lock = threading.Lock()
_installed = False


def install() -> None:
    """Checks the TensorFlow version, then installs every replacement; once per process."""
    global _installed
    with _lock:
        if _installed:
            return
        check_versions()
        _install_direct_read()
        _install_local_partial_batch_check()
        _install_iterator_hand_over()
        _install_table_gradient_route()
        _install_checkpoint_prefix()
        _install_keras_build_from_first_replica()
        _install_keras_loss_share()
        _install_keras_optimizer_extras()
        _install_dataset_iterator_hand_over()
        _installed = True


# -- 1. direct input ----------------------------------------------------------------------------

class DirectReadOptions(tf.distribute.InputOptions):
    """TensorFlow's direct-read options, marked as read for every local replica."""

    __slots__ = ()


def read_one_element_per_replica(distributed, per_replica_buffer_size: int = 1) -> None:
    """Makes the iterators of ``distributed`` (not yet iterated) read its dataset directly.

    Each worker then iterates the dataset itself (TensorFlow's per-replica
    mode without fetching to a device) and reads consecutive elements, one per
    local replica, in replica order.
    """
    install()
    direct = DirectReadOptions(
        experimental_fetch_to_device=False,
        experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA,
        experimental_per_replica_buffer_size=per_replica_buffer_size)
    fields.set_input_options(distributed, direct)
    assert not input_lib._should_use_multi_device_iterator(direct)  # pylint: disable=protected-access


def _in_order(read, count: int, dependencies) -> list:
    """``count`` results of ``read()``, each read after the previous one's outputs exist."""
    results = []
    for _ in range(count):
        with tf.control_dependencies(dependencies(results[-1]) if results else []):
            results.append(read())
    return results


def _element_tensors(element) -> list:
    return tf.nest.flatten(element, expand_composites=True)


def _install_direct_read() -> None:
    worker_iterator = input_lib._SingleWorkerDatasetIteratorBase  # pylint: disable=protected-access
    get_next_as_list = worker_iterator.get_next_as_list
    get_next_as_optional_list = worker_iterator.get_next_as_optional_list

    def direct_get_next_as_list(self, name=None):
        if not isinstance(self._options, DirectReadOptions):
            return get_next_as_list(self, name)
        with tf.device(self._worker):
            return _in_order(self._iterator.get_next, len(self._devices), _element_tensors)

    def direct_get_next_as_optional_list(self):
        if not isinstance(self._options, DirectReadOptions):
            return get_next_as_optional_list(self)
        with tf.device(self._worker):
            return _in_order(self._iterator.get_next_as_optional, len(self._devices),
                             lambda optional: [optional._variant_tensor])  # pylint: disable=protected-access

    worker_iterator.get_next_as_list = direct_get_next_as_list
    worker_iterator.get_next_as_optional_list = direct_get_next_as_optional_list


# -- 2. local partial-batch check ---------------------------------------------------------------

_balanced_classes: set[type] = set()  # strategies whose balanced iterators check locally
_local_check = threading.local()
_NOT_MULTI_WORKER = types.SimpleNamespace(
    extended=types.SimpleNamespace(_in_multi_worker_mode=lambda: False))


def check_partial_batches_locally(strategy_class) -> None:
    """Makes ``get_next_as_optional`` local for iterators of ``strategy_class`` whose
    partial-batch check is skipped (`fields.skip_partial_batch_check`). Idempotent."""
    install()
    _balanced_classes.add(strategy_class)


def _install_local_partial_batch_check() -> None:
    get_next_as_optional = input_lib.DistributedIterator.get_next_as_optional
    replicas_with_values = input_lib._calculate_replicas_with_values  # pylint: disable=protected-access

    def balanced_get_next_as_optional(self):
        if (self._enable_get_next_as_optional
                or not isinstance(self._strategy, tuple(_balanced_classes))):
            return get_next_as_optional(self)
        _local_check.active = True
        try:
            return get_next_as_optional(self)
        finally:
            _local_check.active = False

    def local_replicas_with_values(strategy, input_workers, optional_list):
        if getattr(_local_check, "active", False):
            strategy = _NOT_MULTI_WORKER  # count this worker's replicas only
        return replicas_with_values(strategy, input_workers, optional_list)

    input_lib.DistributedIterator.get_next_as_optional = balanced_get_next_as_optional
    input_lib._calculate_replicas_with_values = local_replicas_with_values  # pylint: disable=protected-access


# -- 3. iterator hand-over ----------------------------------------------------------------------

def hand_over_dropped_iterators(distributed, hand_over) -> None:
    """Iterators made eagerly from ``distributed`` from now on, once garbage, call
    ``hand_over(tf_data_iterators)`` in the thread that drops them, with the last
    references to their tf.data iterators."""
    install()
    distributed._tfx_hand_over_iterators = hand_over  # pylint: disable=protected-access


def _take_and_hand_over(hand_over, workers: list) -> None:
    # Runs in the thread that drops the distributed iterator. Take the tf.data
    # iterators out of the per-worker wrappers so that the callee holds the
    # last references, whatever this thread frees afterwards.
    hand_over(fields.take_dataset_iterators(workers))


def _handing_over_iter(make_iterator):
    def __iter__(self):
        iterator = make_iterator(self)
        hand_over = getattr(self, "_tfx_hand_over_iterators", None)
        if hand_over is not None and tf.executing_eagerly():
            weakref.finalize(iterator, _take_and_hand_over, hand_over,
                             fields.per_worker_iterators(iterator))
        return iterator

    return __iter__


def _install_iterator_hand_over() -> None:
    for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        cls.__iter__ = _handing_over_iter(cls.__iter__)


# -- 4. table gradients ------------------------------------------------------------------------

def route_table_gradients() -> None:
    """Lets strategies with ``extended.push_table_gradients`` take their tables'
    gradients out of Keras's optimizer step. Idempotent."""
    install()


def _install_table_gradient_route() -> None:
    from keras.src.backend.tensorflow import optimizer as keras_tf_optimizer

    original = keras_tf_optimizer.TFOptimizer._backend_update_step

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        extended = getattr(self._distribution_strategy, "extended", None)
        route = getattr(extended, "push_table_gradients", None)
        if route is not None:
            grads, trainable_variables = route(self, grads, trainable_variables, learning_rate)
            if not trainable_variables:
                return None
        return original(self, grads, trainable_variables, learning_rate)

    keras_tf_optimizer.TFOptimizer._backend_update_step = _backend_update_step


# -- 5. checkpoint prefix -----------------------------------------------------------------------

_saving = threading.local()


def current_checkpoint_prefix() -> str | None:
    """The file prefix of the `tf.train.Checkpoint` save running in this thread, or None."""
    install()
    prefixes = getattr(_saving, "prefixes", None)
    return prefixes[-1] if prefixes else None


def current_restore_prefix() -> str | None:
    """The file prefix of the `tf.train.Checkpoint` restore running in this thread, or None.

    None also for a restoration deferred until an object is created (after
    ``restore()`` returned).
    """
    install()
    prefixes = getattr(_saving, "restoring", None)
    return prefixes[-1] if prefixes else None


def _as_prefix(file_prefix):
    if isinstance(file_prefix, tf.Tensor):
        file_prefix = file_prefix.numpy() if tf.executing_eagerly() else None
    if isinstance(file_prefix, bytes):
        file_prefix = file_prefix.decode("utf-8")
    return file_prefix


def _recording(stack_name, prefix, call):
    stack = getattr(_saving, stack_name, None)
    if stack is None:
        stack = []
        setattr(_saving, stack_name, stack)
    stack.append(prefix)
    try:
        return call()
    finally:
        stack.pop()


def _install_checkpoint_prefix() -> None:
    from tensorflow.python.checkpoint import checkpoint as checkpoint_lib

    saver = checkpoint_lib.TrackableSaver
    original_save, original_restore = saver.save, saver.restore

    def save(self, file_prefix, *args, **kwargs):
        prefix = _as_prefix(file_prefix)
        number = kwargs.get("checkpoint_number", args[0] if args else None)
        if prefix is not None and number:  # as TrackableSaver.save names the files
            prefix = f"{prefix}-{int(number)}"
        return _recording("prefixes", prefix,
                          lambda: original_save(self, file_prefix, *args, **kwargs))

    def restore(self, save_path, *args, **kwargs):
        return _recording("restoring", _as_prefix(save_path),
                          lambda: original_restore(self, save_path, *args, **kwargs))

    saver.save, saver.restore = save, restore

    from tensorflow.python.checkpoint import checkpoint_management
    original_delete = checkpoint_management._delete_file_if_exists

    def delete_file_if_exists(filespec):
        original_delete(filespec)
        if isinstance(filespec, str) and filespec.endswith(".index"):
            prefix = filespec[:-len(".index")]
            for suffix in tuple(_companion_globs):
                for path in tf.io.gfile.glob(prefix + suffix):
                    tf.io.gfile.remove(path)

    checkpoint_management._delete_file_if_exists = delete_file_if_exists


_companion_globs: list[str] = []


def delete_with_checkpoints(glob_suffix: str) -> None:
    """TensorFlow's deletion of checkpoint ``P`` also deletes the files ``P + glob_suffix``."""
    install()
    if glob_suffix not in _companion_globs:
        _companion_globs.append(glob_suffix)

# -- 6. Keras's model build from the first replica's values -------------------------------------

_first_replica_build_classes: set[type] = set()


def build_from_first_replica(strategy_class) -> None:
    """Makes Keras build models of ``strategy_class`` from the first replica's slice of the
    first batch, not from its element-wise mean over replicas. Idempotent."""
    install()
    _first_replica_build_classes.add(strategy_class)


def _install_keras_build_from_first_replica() -> None:
    from keras.src.backend.tensorflow import trainer  # pylint: disable=import-outside-toplevel

    maybe_symbolic_build = trainer.TensorFlowTrainer._maybe_symbolic_build  # pylint: disable=protected-access

    def build_from_first_replica_values(self, iterator=None, data_batch=None):
        strategy = self._distribute_strategy  # pylint: disable=protected-access
        if (iterator is None or data_batch is not None
                or not isinstance(strategy, tuple(_first_replica_build_classes))):
            return maybe_symbolic_build(self, iterator=iterator, data_batch=data_batch)
        for _, _, it in iterator:  # as Keras reads the first batch
            data_batch = tf.nest.map_structure(
                lambda v: (strategy.experimental_local_results(v)[0]
                           if isinstance(v, tf.distribute.DistributedValues) else v),
                next(it))
            break
        return maybe_symbolic_build(self, iterator=None, data_batch=data_batch)

    trainer.TensorFlowTrainer._maybe_symbolic_build = build_from_first_replica_values  # pylint: disable=protected-access


# -- 7. loss scaling by the replica's share of the global batch ---------------------------------

_loss_share = threading.local()  # per replica thread: this replica's share, a scalar tensor


class replica_loss_share:  # pylint: disable=invalid-name
    """Within the block (in one replica's thread), Keras scales losses by ``share``.

    ``share``: a float32 scalar tensor, this replica's rows over the global
    batch's rows (0 for a replica without rows).
    """

    def __init__(self, share):
        install()
        self._share = share

    def __enter__(self):
        self._outer = getattr(_loss_share, "share", None)
        _loss_share.share = self._share

    def __exit__(self, *exc):
        _loss_share.share = self._outer


def _install_keras_loss_share() -> None:
    from keras.src import ops  # pylint: disable=import-outside-toplevel
    from keras.src.losses import loss as loss_module  # pylint: disable=import-outside-toplevel

    scale = loss_module.scale_loss_for_distribution
    unscale = loss_module.unscale_loss_for_distribution

    def scale_by_share(value):
        share = getattr(_loss_share, "share", None)
        if share is None:
            return scale(value)
        return ops.multiply(value, ops.cast(share, value.dtype))

    def unscale_by_share(value):
        share = getattr(_loss_share, "share", None)
        if share is None:
            return unscale(value)
        # A replica without rows has a zero loss, counted with weight 0.
        return ops.divide_no_nan(value, ops.cast(share, value.dtype))

    loss_module.scale_loss_for_distribution = scale_by_share
    loss_module.unscale_loss_for_distribution = unscale_by_share


# -- 8. optimizer state kept elsewhere ----------------------------------------------------------

EXTRA_KEY_PREFIX = "tfx_ps_"  # the entries a strategy adds to the optimizer's


def keep_optimizer_extras() -> None:
    """Lets strategies with ``extended.save_optimizer_extras`` / ``load_optimizer_extras``
    add to the optimizer's entry of Keras's files. Idempotent."""
    install()


def _install_keras_optimizer_extras() -> None:
    from keras.src.optimizers import base_optimizer

    cls = base_optimizer.BaseOptimizer
    original_save, original_load = cls.save_own_variables, cls.load_own_variables

    def _extended(optimizer):
        return getattr(getattr(optimizer, "_distribution_strategy", None), "extended", None)

    def save_own_variables(self, store):
        original_save(self, store)
        save = getattr(_extended(self), "save_optimizer_extras", None)
        if save is not None:
            save(self, store)

    def load_own_variables(self, store):
        keys = list(store.keys())
        if not any(k.startswith(EXTRA_KEY_PREFIX) for k in keys):
            return original_load(self, store)
        original_load(self, {k: store[k] for k in keys if not k.startswith(EXTRA_KEY_PREFIX)})
        load = getattr(_extended(self), "load_optimizer_extras", None)
        if load is not None:
            load(self, store)

    cls.save_own_variables, cls.load_own_variables = save_own_variables, load_own_variables


# -- 9. eager iterators of tf.data datasets -----------------------------------------------------

_dataset_hand_over = None  # the callback of `hand_over_dataset_iterators`, once set


def hand_over_dataset_iterators(hand_over) -> None:
    """Every eager tf.data iterator made from now on (``iter(dataset)``, ``for x in dataset``,
    Keras's fit/evaluate/predict), once garbage, calls ``hand_over([iterator_resource])`` in
    the thread that drops it, with the last reference to its resource. Process-wide; idempotent."""
    global _dataset_hand_over
    install()
    _dataset_hand_over = hand_over


def _take_resource_and_hand_over(hand_over, iterator_fields: dict) -> None:
    # Runs as the iterator dies, before its fields are cleared: take the
    # resource out of them so that the callee holds the last reference.
    hand_over([fields.take_iterator_resource(iterator_fields)])


def _install_dataset_iterator_hand_over() -> None:
    make_iterator = tf.data.Dataset.__iter__

    def __iter__(self):
        iterator = make_iterator(self)
        if _dataset_hand_over is not None and tf.executing_eagerly():
            weakref.finalize(iterator, _take_resource_and_hand_over, _dataset_hand_over,
                             fields.iterator_fields(iterator))
        return iterator

    tf.data.Dataset.__iter__ = __iter__
