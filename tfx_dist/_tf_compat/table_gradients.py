"""Table gradients: a strategy that holds tables takes their gradients out of Keras's step.

Replaces Keras's ``TFOptimizer._backend_update_step``
(``keras.src.backend.tensorflow.optimizer``: all-reduce every gradient, then
apply the update rule to every variable). When the optimizer's strategy holds
tables itself (its extended is a `tfx_dist.tables.protocol.TableHost`), the
host's ``push_table_gradients`` runs first and takes the gradients of its
tables' anchors (parameter servers apply their rule where the rows live;
tables sharded over the workers send rows to their owners); Keras's own step
gets the rest, or is skipped when nothing is left.
"""

from __future__ import annotations

from tfx_dist._tf_compat import replacements
from tfx_dist.tables.protocol import TableHost


def route_table_gradients() -> None:
    """Lets strategies whose extended is a `TableHost` take their tables'
    gradients out of Keras's optimizer step. Idempotent."""
    replacements.install()


def install() -> None:
    from keras.src.backend.tensorflow import optimizer as keras_tf_optimizer

    original = keras_tf_optimizer.TFOptimizer._backend_update_step

    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        extended = getattr(self._distribution_strategy, "extended", None)
        if isinstance(extended, TableHost):
            grads, trainable_variables = extended.push_table_gradients(
                self, grads, trainable_variables, learning_rate)
            if not trainable_variables:
                return None
        return original(self, grads, trainable_variables, learning_rate)

    keras_tf_optimizer.TFOptimizer._backend_update_step = _backend_update_step
