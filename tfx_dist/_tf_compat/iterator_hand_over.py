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

Both hand over the same way (`_hand_over_when_garbage`), but stay two
replacements: when a distributed iterator fetches to devices (TensorFlow's
default), the resource that reads the dataset (and waits for autotuning when
destroyed) is its ``OwnedMultiDeviceIterator``'s own, not one made by
``tf.data.Dataset.__iter__``; and the first is asked for per dataset by a
strategy while the second is process-wide (Horovod-style scripts, which
distribute no dataset), so neither can stand for the other.
"""

from __future__ import annotations

import weakref

import tensorflow as tf

from tfx_dist._tf_compat import fields, replacements
from tfx_dist._tf_compat.imports import input_lib

# The attribute of a marked distributed dataset that holds its callback.
_HAND_OVER_ATTRIBUTE = "_tfx_hand_over_iterators"


def _hand_over_when_garbage(iterator, hand_over, take, held) -> None:
    """Once ``iterator`` is garbage, calls ``hand_over(take(held))`` in the thread that drops it.

    ``held``: the part of the iterator that holds its tf.data iterators (the
    finalizer keeps it, not the iterator); ``take`` takes them out of it, so
    that the callee holds the last references, whatever that thread frees
    afterwards.
    """
    weakref.finalize(iterator, _take_and_hand_over, hand_over, take, held)


def _take_and_hand_over(hand_over, take, held) -> None:
    hand_over(take(held))


# -- distributed iterators of marked datasets ---------------------------------------------------

def hand_over_dropped_iterators(distributed, hand_over) -> None:
    """Iterators made eagerly from ``distributed`` from now on, once garbage, call
    ``hand_over(tf_data_iterators)`` in the thread that drops them, with the last
    references to their tf.data iterators."""
    replacements.install()
    setattr(distributed, _HAND_OVER_ATTRIBUTE, hand_over)


def _handing_over_iter(make_iterator):
    def __iter__(self):
        iterator = make_iterator(self)
        hand_over = getattr(self, _HAND_OVER_ATTRIBUTE, None)
        if hand_over is not None and tf.executing_eagerly():
            # The per-worker wrappers, each holding one tf.data iterator.
            _hand_over_when_garbage(iterator, hand_over, fields.take_dataset_iterators,
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


def _take_resource(iterator_fields: dict) -> list:
    return [fields.take_iterator_resource(iterator_fields)]


def _handing_over_resource_iter(make_iterator):
    def __iter__(self):
        iterator = make_iterator(self)
        if _dataset_hand_over is not None and tf.executing_eagerly():
            # The iterator's fields, read as it dies (before they are cleared).
            _hand_over_when_garbage(iterator, _dataset_hand_over, _take_resource,
                                    fields.iterator_fields(iterator))
        return iterator

    return __iter__


# -- installation ---------------------------------------------------------------------------

def install() -> None:
    """Installs both replacements."""
    for cls in (input_lib.DistributedDataset, input_lib.DistributedDatasetsFromFunction):
        cls.__iter__ = _handing_over_iter(cls.__iter__)
    tf.data.Dataset.__iter__ = _handing_over_resource_iter(tf.data.Dataset.__iter__)
