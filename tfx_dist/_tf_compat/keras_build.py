"""Keras's model build from the first batch: from the first replica's values, not their mean.

Replaces Keras's ``TensorFlowTrainer._maybe_symbolic_build``
(``keras.src.backend.tensorflow.trainer``; ``Trainer`` from Keras 3.16), which averages the first batch's
per-replica values element-wise (``strategy.reduce("MEAN", batch,
axis=None)``) only to learn shapes and dtypes; that fails when a global batch
splits unevenly (3/3/3/1 rows). For the strategy classes registered with
`build_from_first_replica` it builds from the first replica's values instead:
the same shapes when the split is even, and the largest slice when not
(TensorFlow deals the extra rows to the first replicas).
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist._tf_compat import replacements
from tfx_dist._tf_compat.keras_trainer import tensorflow_trainer_class

_first_replica_build_classes: set[type] = set()


def build_from_first_replica(strategy_class) -> None:
    """Makes Keras build models of ``strategy_class`` from the first replica's slice of the
    first batch, not from its element-wise mean over replicas. Idempotent."""
    replacements.install()
    _first_replica_build_classes.add(strategy_class)


def building_symbolically() -> bool:
    """Whether Keras is tracing a call for shapes only (``backend.compute_output_spec``, as
    ``_symbolic_build`` does for a subclassed model): its variables are not created yet."""
    from keras.src.backend.common import symbolic_scope  # pylint: disable=import-outside-toplevel

    return symbolic_scope.in_symbolic_scope()


def install() -> None:
    keras_trainer = tensorflow_trainer_class()
    maybe_symbolic_build = keras_trainer._maybe_symbolic_build  # pylint: disable=protected-access

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

    keras_trainer._maybe_symbolic_build = build_from_first_replica_values  # pylint: disable=protected-access
