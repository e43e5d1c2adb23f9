"""Dropped input iterators handed over (to be destroyed off the training path).

Two replacements, for the two kinds of eager iterator a program drops:

* ``input_lib.DistributedDataset.__iter__`` and
  ``input_lib.DistributedDatasetsFromFunction.__iter__``: a distributed
  iterator of a dataset marked with `hand_over_dropped_iterators` gives its
  per-worker tf.data iterators, once it is garbage, to the dataset's callback.
* ``tf.data.Dataset.__iter__`` (``iter(dataset)``, ``for x in dataset``, and
  the iterators Keras's ``fit``, ``evaluate`` and ``predict`` make from a
  dataset no strategy distributed): once `hand_over_dataset_iterators` set a
  callback, each eager iterator's resource, once the iterator is garbage.

Destroying a tf.data iterator waits for its autotuning thread to stop
(`tfx_dist.input.iterator_reaper` explains why that matters and takes them).
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfx_dist._tf_compat import fields, replacements
from tfx_dist._tf_compat.imports import input_lib


# -- distributed iterators of marked datasets ---------------------------------------------------

def hand_over_dropped_iterators(distributed, hand_over) -> None:
    """Iterators made eagerly from ``distributed`` from now on, once garbage, call
    ``hand_over(tf_data_iterators)`` in the thread that drops them, with the last
    references to their tf.data iterators."""
    replacements.install()
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


# -- eager iterators of tf.data datasets --------------------------------------------------------

_dataset_hand_over = None  # the callback of `hand_over_dataset_iterators`, once set


def hand_over_dataset_iterators(hand_over) -> None:
    """Every eager tf.data iterator made from now on (``iter(dataset)``, ``for x in dataset``,
    Keras's fit/evaluate/predict), once garbage, calls ``hand_over([iterator_resource])`` in
    the thread that drops it, with the last reference to its resource. Process-wide; idempotent."""
    global _dataset_hand_over
    replacements.install()
    _dataset_hand_over = hand_over


def _take_resource_and_hand_over(hand_over, iterator_fields: dict) -> None:
    # Runs as the iterator dies, before its fields are cleared: take the
    # resource out of them so that the callee holds the last reference.
    hand_over([fields.take_iterator_resource(iterator_fields)])


def _handing_over_resource_iter(make_iterator):
    def __iter__(self):
        iterator = make_iterator(self)
        if _dataset_hand_over is not None and tf.executing_eagerly():
            weakref.finalize(iterator, _take_resource_and_hand_over, _dataset_hand_over,
                             fields.iterator_fields(iterator))
        return iterator

    return __iter__


# -- installation ---------------------------------------------------------------------------

def install() -> None:
    """Installs both replacements."""
    for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        cls.__iter__ = _handing_over_iter(cls.__iter__)
    tf.data.Dataset.__iter__ = _handing_over_resource_iter(tf.data.Dataset.__iter__)
