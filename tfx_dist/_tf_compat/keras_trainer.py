"""Keras's TensorFlow trainer class, whose methods tfx_dist wraps or replaces.

Keras 3.16 renamed ``keras.src.backend.tensorflow.trainer.TensorFlowTrainer`` to
``Trainer`` (same module, same methods: ``fit``, ``evaluate``, ``predict``,
``_maybe_symbolic_build``); tf-nightly pulls that Keras. Keyed by the Keras
version so that a Keras with neither name fails here, naming both.
"""

from __future__ import annotations


def tensorflow_trainer_class() -> type:
    """The class every Keras model under the TensorFlow backend inherits fit/evaluate/predict from."""
    import keras  # pylint: disable=import-outside-toplevel
    from keras.src.backend.tensorflow import trainer  # pylint: disable=import-outside-toplevel

    from tfx_dist._tf_compat import versions  # pylint: disable=import-outside-toplevel

    name = "Trainer" if versions.keras_at_least("3.16") else "TensorFlowTrainer"
    cls = getattr(trainer, name, None)
    if cls is None:
        raise AttributeError(f"Keras {keras.__version__}: keras.src.backend.tensorflow.trainer has no "
                             f"{name} (TensorFlowTrainer before Keras 3.16, Trainer from 3.16)")
    return cls
