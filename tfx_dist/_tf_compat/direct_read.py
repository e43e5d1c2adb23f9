"""Direct input: the per-worker iterator reads one element per local replica, in order.

Replaces ``get_next_as_list`` and ``get_next_as_optional_list`` of
``input_lib._SingleWorkerDatasetIteratorBase`` (TensorFlow's per-worker
iterator of a distributed dataset). For iterators whose options are
`DirectReadOptions` (set by `read_one_element_per_replica`) they read
consecutive elements, one per local replica, in replica order; TensorFlow's
direct path reads one element per call (it only ever has one replica there).
Every other iterator runs TensorFlow's functions.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist._tf_compat import fields, replacements
from tfx_dist._tf_compat.imports import input_lib


class DirectReadOptions(tf.distribute.InputOptions):
    """TensorFlow's direct-read options, marked as read for every local replica."""

    __slots__ = ()


def read_one_element_per_replica(distributed, per_replica_buffer_size: int = 1) -> None:
    """Makes the iterators of ``distributed`` (not yet iterated) read its dataset directly.

    Each worker then iterates the dataset itself (TensorFlow's per-replica
    mode without fetching to a device) and reads consecutive elements, one per
    local replica, in replica order.
    """
    replacements.install()
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


def install() -> None:
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
