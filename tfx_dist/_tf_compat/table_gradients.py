"""Table gradients: a strategy that holds tables takes their gradients out of Keras's step.

Replaces Keras's ``TFOptimizer._backend_update_step``
(``keras.src.backend.tensorflow.optimizer``: all-reduce every gradient, then
apply the update rule to every variable). When the optimizer's strategy holds
tables itself (its extended is a `tfx_dist.tables.protocol.TableHost`), the
host's ``push_table_gradients`` runs first and takes the gradients of its
tables' anchors (parameter servers apply their rule where the rows live;
tables sharded over the workers send rows to their owners); Keras's own step
gets the rest, or is skipped when nothing is left. Without such a host, a
table of this process (`tfx_dist.tables.local_dynamic`) applies its own.
"""

from __future__ import annotations

from tfx_dist._tf_compat import replacements
from tfx_dist.tables.protocol import TableHost, table_of


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
        elif any(table_of(v) is not None for v in trainable_variables):
            # Tables of this process (a local dynamic table) apply their own rows' gradients.
            grads, trainable_variables = _apply_own_table_gradients(
                self, grads, trainable_variables, learning_rate)
            if not trainable_variables:
                return None
        return original(self, grads, trainable_variables, learning_rate)

    keras_tf_optimizer.TFOptimizer._backend_update_step = _backend_update_step


def _apply_own_table_gradients(optimizer, grads, variables, learning_rate):
    rest_grads, rest_vars = [], []
    for grad, var in zip(grads, variables):
        table = table_of(var)
        if table is None:
            rest_grads.append(grad)
            rest_vars.append(var)
        elif grad is not None:
            table.apply_own_gradient(optimizer, grad, learning_rate)
    return rest_grads, rest_vars
