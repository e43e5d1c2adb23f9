"""Keras's NumPy input remembers where it came from, so a multi-worker strategy can reorder it.

Replaces ``ArrayDataAdapter.get_tf_dataset``
(``keras.src.trainers.data_adapters.array_data_adapter``): the dataset it
returns for shuffled input (``shuffle=True``, Keras's default, or
``"batch"``) records its adapter. Keras draws each epoch's order with an
unseeded ``tf.random.shuffle``, a different one on every worker, which the
strategy's sharding by DATA then splits into overlapping halves;
`tfx_dist.input.array_order` reads the adapter back (`shuffled_array_input`)
and builds the same batches in an order every worker draws alike. Keras's own
dataset is unchanged.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tfx_dist._tf_compat import replacements

_ADAPTER_FIELD = "_tfx_shuffled_array_adapter"


@dataclasses.dataclass(frozen=True)
class ArrayInput:
    """What Keras's adapter holds: the arrays (converted for tf.data) and how it batches them."""

    arrays: object
    num_samples: int
    batch_size: int
    shuffle: object  # True or "batch"


def shuffled_array_input(dataset) -> ArrayInput | None:
    """The shuffled NumPy input ``dataset`` was built from by Keras, or None."""
    replacements.install()
    adapter = getattr(dataset, _ADAPTER_FIELD, None)
    if adapter is None:
        return None
    from keras.src import tree  # pylint: disable=import-outside-toplevel
    from keras.src.trainers.data_adapters import array_slicing  # pylint: disable=import-outside-toplevel

    arrays = array_slicing.convert_to_sliceable(adapter._inputs, target_backend="tensorflow")
    return ArrayInput(tree.lists_to_tuples(arrays), adapter._num_samples, adapter._batch_size,
                      adapter._shuffle)


def gather_rows(arrays, indices):
    """The rows ``indices`` of every array of ``arrays`` (as Keras's adapter slices a batch)."""
    from keras.src import tree  # pylint: disable=import-outside-toplevel
    from keras.src.trainers.data_adapters import array_slicing  # pylint: disable=import-outside-toplevel

    def rows_of(array):
        if isinstance(array, array_slicing.TensorflowSparseWrapper):
            return array_slicing.slice_tensorflow_sparse_wrapper(array, indices)
        if isinstance(array, (list, tuple, dict)):
            return None  # a structure: traverse goes on into it
        return tf.gather(array, indices, axis=0) if tf.is_tensor(array) else array

    return tree.traverse(rows_of, arrays)


def install() -> None:
    from keras.src.trainers.data_adapters import array_data_adapter  # pylint: disable=import-outside-toplevel

    adapter_class = array_data_adapter.ArrayDataAdapter
    get_tf_dataset = adapter_class.get_tf_dataset

    def get_tf_dataset_remembering_adapter(self):
        dataset = get_tf_dataset(self)
        if self._shuffle:  # pylint: disable=protected-access
            setattr(dataset, _ADAPTER_FIELD, self)
        return dataset

    adapter_class.get_tf_dataset = get_tf_dataset_remembering_adapter
