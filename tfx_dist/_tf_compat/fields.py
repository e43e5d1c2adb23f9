"""Private fields of TensorFlow objects that tfx_dist reads or sets, each behind a named function.

A TensorFlow upgrade that renames one of these fields breaks the function here,
not the strategies that call it.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfx_dist._tf_compat.imports import cross_device_utils, mirrored_strategy, numpy_dataset


# -- distributed datasets and their iterators ---------------------------------------------------

def input_workers(distributed):
    """The ``InputWorkers`` (input device and compute devices per worker) of a distributed dataset."""
    return distributed._input_workers  # pylint: disable=protected-access


def set_input_options(distributed, options: tf.distribute.InputOptions) -> None:
    """Replaces the input options of a distributed dataset that has not been iterated yet.

    Its iterators and their type spec read the replication mode from there, consistently.
    """
    distributed._options = options  # pylint: disable=protected-access


def skip_partial_batch_check(distributed) -> None:
    """Turns off the per-step all-reduce of "this worker still has data" in ``get_next``.

    TensorFlow's own flag, which ``DistributedIterator.get_next`` honours.
    """
    distributed._enable_get_next_as_optional = False  # pylint: disable=protected-access


def per_worker_iterators(iterator) -> list:
    """The per-worker wrappers of a distributed iterator, each holding one tf.data iterator."""
    return list(iterator._iterators)  # pylint: disable=protected-access


def iterator_fields(iterator) -> dict:
    """The fields of an eager tf.data iterator (``iter(dataset)``), for `take_iterator_resource`."""
    return vars(iterator)


def take_iterator_resource(iterator_fields: dict):
    """Takes the resource tensor out of a tf.data iterator's fields: whoever holds it holds the
    tf.data iterator, destroyed with its last reference."""
    return iterator_fields.pop("_iterator_resource")


def take_dataset_iterators(workers) -> list:
    """Takes the tf.data iterator out of each per-worker wrapper (leaving None there)."""
    taken = []
    for worker in workers:
        taken.append(worker._iterator)  # pylint: disable=protected-access
        worker._iterator = None  # pylint: disable=protected-access
    return taken


# -- tf.data datasets ---------------------------------------------------------------------------

def dataset_inputs(dataset: tf.data.Dataset) -> list:
    """The datasets ``dataset`` reads from."""
    return list(dataset._inputs())  # pylint: disable=protected-access


def reshuffles_each_iteration(dataset: tf.data.Dataset) -> bool:
    """Whether ``dataset`` is a ``shuffle(..., reshuffle_each_iteration=True)`` step."""
    return getattr(dataset, "_reshuffle_each_iteration", False) is True  # pylint: disable=protected-access


def shuffle_seeds(dataset: tf.data.Dataset) -> tuple:
    """The (op seed, graph seed) tensors of a shuffle step; (0, 0) means TensorFlow draws its own."""
    return tuple(getattr(dataset, name, None) for name in ("_seed", "_seed2"))


def dataset_function_graphs(dataset: tf.data.Dataset) -> list:
    """The graphs of the functions ``dataset`` applies (map, filter, ...)."""
    return [fn.function.graph for fn in dataset._functions()]  # pylint: disable=protected-access


# -- graphs ------------------------------------------------------------------------------------

def run_independently(graph, ops) -> None:
    """Exempts ``ops`` of a ``tf.function`` graph from the program-order chaining of stateful ops.

    Automatic control dependencies would otherwise run every stateful op (a
    collective included) after the previous one. No-op for graphs without that
    manager (TF1-style graphs).
    """
    acd = getattr(graph, "experimental_acd_manager", None)
    for op in ops if acd is not None else ():
        acd.run_independently(op)


# -- the multi-worker strategy's extended object ------------------------------------------------

def init_collective_extended(extended, *, cluster_resolver, info, local_devices,
                             worker_device: str, cross_device_ops, communication_options) -> None:
    """Sets what ``CollectiveAllReduceExtended.__init__`` would, without its server or runtime.

    TensorFlow's methods that tfx_dist's multi-worker extended inherits (input
    pipeline, variable mirroring, replica bookkeeping) read these fields.

    Args:
      info: the `tfx_dist.cluster.ClusterInfo` of this worker.
      local_devices: this worker's compute devices.
      worker_device: this worker's host device, canonical.
      cross_device_ops: the `tf.distribute.CrossDeviceOps` for every reduction.
    """
    extended._communication_options = communication_options
    extended._collective_key_base = 0
    extended._cluster_resolver = cluster_resolver
    extended._num_workers = info.num_workers
    extended._is_chief = info.is_chief
    extended._id_in_cluster = info.rank
    extended._task_type = info.task_type
    extended._task_id = info.task_index
    extended._cluster_spec = tf.train.ClusterSpec(info.cluster_dict()) if info.cluster else None
    extended._local_or_standalone_client_mode = False
    extended._rpc_layer = info.rpc_layer
    extended._worker_device = worker_device
    extended._host_input_device = numpy_dataset.SingleDevice(worker_device)
    extended._cross_device_ops = cross_device_ops
    extended._host_cross_device_ops = cross_device_ops
    extended._collective_keys = cross_device_utils.CollectiveKeys(group_key_start=1)
    mirrored_strategy.MirroredExtended._initialize_single_worker(extended, local_devices)
    extended._num_devices_per_worker = len(local_devices)
    extended._local_device_type = tf.DeviceSpec.from_string(local_devices[0]).device_type or "CPU"
    extended._cfer_fn_cache = weakref.WeakKeyDictionary()
    extended.experimental_enable_get_next_as_optional = True
    extended._use_var_policy = False


# -- variables read by custom ops ----------------------------------------------------------------

def component_variable(variable):
    """The plain variable a custom op should take the handle of, for ``variable`` here.

    A distributed (mirrored) variable's component of the current replica, or
    its primary in cross-replica context, as its own ``value()`` reads; any
    other variable as it is.
    """
    get = getattr(variable, "_get_on_device_or_primary", None)  # pylint: disable=protected-access
    return get() if get is not None else variable
