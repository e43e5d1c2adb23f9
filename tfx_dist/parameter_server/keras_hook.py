"""Routes the gradients of parameter-server tables out of Keras's optimizer.

Keras 3's TensorFlow optimizer all-reduces every gradient and then applies
its update rule to every variable (`TFOptimizer._backend_update_step`). A
table on parameter servers must instead send its gradient rows to the
servers, which apply the rule where the rows live. This wraps that one
method: before Keras's own work, a strategy that holds tables
(``extended.push_table_gradients``) takes the tables' gradients out and
pushes them. Private Keras API, pinned with the rest (see tfx_dist/_tf_compat).
"""

from __future__ import annotations

import functools

from keras.src.backend.tensorflow import optimizer as tf_optimizer

_installed = False


def install() -> None:
    """Wraps `TFOptimizer._backend_update_step` once per process."""
    global _installed
    if _installed:
        return
    original = tf_optimizer.TFOptimizer._backend_update_step

    @functools.wraps(original)
    def _backend_update_step(self, grads, trainable_variables, learning_rate):
        extended = getattr(self._distribution_strategy, "extended", None)
        route = getattr(extended, "push_table_gradients", None)
        if route is not None:
            grads, trainable_variables = route(self, grads, trainable_variables, learning_rate)
            if not trainable_variables:
                return None
        return original(self, grads, trainable_variables, learning_rate)

    tf_optimizer.TFOptimizer._backend_update_step = _backend_update_step
    _installed = True
