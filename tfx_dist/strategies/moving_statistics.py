"""Non-trainable statistics that each replica updates from its own batch: averaged, as tf.keras did.

Keras 3 creates `BatchNormalization`'s moving mean and variance (and any
layer's non-trainable float state) with ``aggregation="none"``. A
`tf.distribute` MirroredVariable assigned in replica context with aggregation
NONE updates only that replica's copy (TensorFlow's
``values._on_write_update_replica``), so with several workers each worker's
copy follows its own share of the batches and the workers' models drift
apart: ``predict`` and saves differ by worker, with no error (TensorFlow's
own MultiWorkerMirroredStrategy does the same under Keras 3). tf.keras
declared these variables ``synchronization=ON_READ, aggregation=MEAN``: each
replica kept its copy and a read averaged them. Creating them with
aggregation MEAN gives the same value at every step (the update is linear:
the mean of the replicas' ``m * v + (1 - m) * x_r`` is ``m * v + (1 - m) *
mean(x_r)``), held by every replica: one small all-reduce per variable per
update. Only a layer's weights (created inside Keras's name scope of a
`keras.layers.Layer`): an optimizer's non-trainable state (LossScaleOptimizer's
``dynamic_scale``, assigned in replica context inside a ``tf.cond``, where no
all-reduce can run) keeps aggregation NONE; so does non-float state (seed
generators' counters): every replica writes the same value there.
"""

from __future__ import annotations

import tensorflow as tf

from tfx_dist._tf_compat import keras_scopes


def averaged(kwargs: dict) -> dict:
    """``tf.Variable`` arguments, with aggregation MEAN for non-trainable float state of
    aggregation NONE and synchronization AUTO or ON_WRITE; others unchanged."""
    if kwargs.get("trainable", True) or kwargs.get("aggregation") not in (None, tf.VariableAggregation.NONE):
        return kwargs
    if kwargs.get("synchronization") not in (None, tf.VariableSynchronization.AUTO,
                                             tf.VariableSynchronization.ON_WRITE):
        return kwargs
    if not keras_scopes.creating_layer_weight():
        return kwargs
    dtype = kwargs.get("dtype")
    if dtype is None:
        initial = kwargs.get("initial_value")
        dtype = getattr(initial, "dtype", None)
    if dtype is None or not tf.as_dtype(dtype).is_floating:
        return kwargs
    return {**kwargs, "aggregation": tf.VariableAggregation.MEAN}
